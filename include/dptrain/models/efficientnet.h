#pragma once
// EfficientNet B0-B7 (Tan and Le 2019) and EfficientNetV2 S/M/L (Tan and Le 2021), as torchvision
// builds them: MBConv and FusedMBConv blocks with squeeze-and-excitation, SiLU, and stochastic
// depth rising linearly from 0 to 0.2 over the blocks.
//
//   auto net = dpt::models::efficientnet("b0", dpt::models::ClassifierOptions().num_classes(10));

#include <string>

#include "dptrain/models/classifier.h"
#include "dptrain/models/feature_network.h"

namespace dpt::models {

// variant: "b0" ... "b7", "v2_s", "v2_m", "v2_l". Classifier dropout and batch-norm settings are
// torchvision's per variant (0.2 for b0 up to 0.5 for b7; eps 1e-3 for b5-b7 and V2).
FeatureNetwork efficientnet(const std::string& variant, const ClassifierOptions& options);

}  // namespace dpt::models
