#pragma once
// The data layer: samplers, datasets (ImageFolder, CIFAR-10, synthetic), fused transforms, loader.
#include "dptrain/data/cifar.h"
#include "dptrain/data/dataset.h"
#include "dptrain/data/device_prefetcher.h"
#include "dptrain/data/image.h"
#include "dptrain/data/image_folder.h"
#include "dptrain/data/interpolation.h"
#include "dptrain/data/loader.h"
#include "dptrain/data/random.h"
#include "dptrain/data/sampler.h"
#include "dptrain/data/synthetic.h"
#include "dptrain/data/transform.h"
