#pragma once
// ConvNeXt (Liu et al. 2022) as torchvision builds it: a 4x4 patchify stem, stages of depthwise
// 7x7 blocks with an inverted MLP run channels-last under LayerNorm, layer scale and stochastic
// depth, and LayerNorm-and-2x2-convolution downsampling between stages.
//
//   auto net = dpt::models::convnext("tiny", dpt::models::ClassifierOptions().num_classes(10));
//   // state dict: features.0.0.weight, features.1.0.layer_scale, features.1.0.block.0.weight, ...,
//   //             classifier.0.weight (LayerNorm2d), classifier.2.weight (Linear)

#include <string>

#include "dptrain/models/classifier.h"
#include "dptrain/models/feature_network.h"

namespace dpt::models {

// size: "tiny", "small", "base" or "large". Stochastic depth rises linearly over the blocks to
// the options' value, by default torchvision's 0.1, 0.4, 0.5, 0.5. ConvNeXt has no batch norm:
// the options' norm_layer does not apply.
FeatureNetwork convnext(const std::string& size, const ClassifierOptions& options);

}  // namespace dpt::models
