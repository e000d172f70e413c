#pragma once
// The first ImageNet convolutional networks, as torchvision builds them: AlexNet (Krizhevsky et
// al. 2012, torchvision's one-GPU variant), VGG (Simonyan and Zisserman 2014) with and without
// batch norm, SqueezeNet 1.0 and 1.1 (Iandola et al. 2016).
//
//   auto vgg = dpt::models::vgg(16, /*batch_norm=*/true, dpt::models::ClassifierOptions().num_classes(10));
//   // state dict: features.0.weight, features.1.running_mean, ..., classifier.6.bias

#include <cstdint>

#include "dptrain/models/classifier.h"
#include "dptrain/models/feature_network.h"

namespace dpt::models {

// Dropout 0.5 before each hidden linear layer, as torchvision.
FeatureNetwork alexnet(const ClassifierOptions& options);
// depth: 11, 13, 16 or 19 (configurations A, B, D, E of the paper).
FeatureNetwork vgg(int depth, bool batch_norm, const ClassifierOptions& options);
// version: "1_0" or "1_1".
FeatureNetwork squeezenet(const std::string& version, const ClassifierOptions& options);

}  // namespace dpt::models
