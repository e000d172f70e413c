#pragma once
// The models layer: torchvision's classification families with torchvision's names, the CIFAR
// ResNets, TorchScript models from Python, one Classifier type over all of them, a registry,
// state dicts.
#include "dptrain/models/batch_norm_relu.h"
#include "dptrain/models/max_pool.h"
#include "dptrain/models/blocks.h"
#include "dptrain/models/classic.h"
#include "dptrain/models/classifier.h"
#include "dptrain/models/convnext.h"
#include "dptrain/models/densenet.h"
#include "dptrain/models/efficientnet.h"
#include "dptrain/models/feature_network.h"
#include "dptrain/models/ghostnet.h"
#include "dptrain/models/inception.h"
#include "dptrain/models/layers.h"
#include "dptrain/models/mobilenet.h"
#include "dptrain/models/regnet.h"
#include "dptrain/models/registry.h"
#include "dptrain/models/resnet.h"
#include "dptrain/models/shufflenet.h"
#include "dptrain/models/state_dict.h"
#include "dptrain/models/torchscript.h"
#include "dptrain/models/vit.h"
