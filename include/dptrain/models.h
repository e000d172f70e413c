#pragma once
// The models layer: torchvision-compatible ResNets, CIFAR ResNets, a registry, state dicts.
#include "dptrain/models/blocks.h"
#include "dptrain/models/registry.h"
#include "dptrain/models/resnet.h"
#include "dptrain/models/state_dict.h"
