// A data-layer source that includes the train layer: cmake/check_layers.cmake must refuse it.
#include "dptrain/data/loader.h"
#include "dptrain/train/trainer.h"
