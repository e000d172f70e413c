#pragma once
// MobileNetV2 (Sandler et al. 2018) and MobileNetV3 small and large (Howard et al. 2019), as
// torchvision builds them, with its names (features.N.conv... / features.N.block...).
//
//   auto net = dpt::models::mobilenet_v3("large", dpt::models::ClassifierOptions().num_classes(10));

#include <string>

#include "dptrain/models/classifier.h"
#include "dptrain/models/feature_network.h"

namespace dpt::models {

// Classifier dropout 0.2; ReLU6; batch norm with PyTorch's defaults.
FeatureNetwork mobilenet_v2(const ClassifierOptions& options, double width_mult = 1.0);
// size: "small" or "large". Hardswish and squeeze-and-excitation (hard sigmoid) where the paper's
// tables put them; batch norm eps 1e-3, momentum 0.01; classifier dropout 0.2.
FeatureNetwork mobilenet_v3(const std::string& size, const ClassifierOptions& options);

}  // namespace dpt::models
