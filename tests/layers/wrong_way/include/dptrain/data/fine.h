// A data-layer header that includes only what comes before it: no complaint about this one.
#include "dptrain/common/error.h"
