// A data-layer source that includes an earlier layer its CMakeLists.txt does not declare (data uses
// only common): cmake/check_layers.cmake must refuse it as well.
#include "dptrain/dist/communicator.h"
