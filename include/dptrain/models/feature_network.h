#pragma once
// The shape most of torchvision's families share: `features` (a Sequential of convolutional
// stages), a pooling to a fixed size, flattening, and `classifier` (a Sequential of linear or 1x1
// layers). AlexNet, VGG, SqueezeNet, MobileNetV2/V3, EfficientNet and ConvNeXt are one of these,
// each built by its own function; their state-dict names are torchvision's: features.N...,
// classifier.N....
//
//   auto net = dpt::models::FeatureNetwork("vgg11", [] {
//     return dpt::models::FeatureNetworkParts{features, std::array<int64_t, 2>{7, 7}, classifier};
//   });

#include <array>
#include <cstdint>
#include <functional>
#include <optional>
#include <ostream>
#include <string>

#include <torch/nn/cloneable.h>
#include <torch/nn/modules/container/sequential.h>
#include <torch/nn/pimpl.h>

#include "dptrain/models/layers.h"

namespace dpt::models {

struct FeatureNetworkParts {
  torch::nn::Sequential features;
  // Adaptive average pooling to this size, then flattening; none: the classifier gets the
  // features as they are (SqueezeNet pools and flattens inside its classifier).
  std::optional<std::array<int64_t, 2>> pool;
  torch::nn::Sequential classifier;
  // false: the classifier gets the pooled features unflattened (ConvNeXt normalises them first).
  bool flatten = true;
};

class FeatureNetworkImpl : public torch::nn::Cloneable<FeatureNetworkImpl> {
 public:
  // `build` makes fresh parts each time reset() (and so clone()) calls it.
  FeatureNetworkImpl(std::string family, std::function<FeatureNetworkParts()> build);
  void reset() override;
  torch::Tensor forward(torch::Tensor images);
  void pretty_print(std::ostream& stream) const override { stream << family_; }

  torch::nn::Sequential features{nullptr};
  torch::nn::Sequential classifier{nullptr};

 private:
  std::string family_;
  std::function<FeatureNetworkParts()> build_;
  std::optional<std::array<int64_t, 2>> pool_;
  bool flatten_ = true;
};
TORCH_MODULE(FeatureNetwork);

// A residual block whose branch is one Sequential registered as `branch_name` (MobileNetV2's
// InvertedResidual: "conv"; MobileNetV3's InvertedResidual, EfficientNet's MBConv and
// FusedMBConv: "block"): x + stochastic_depth(branch(x)) when `residual`, else branch(x).
class InvertedResidualImpl : public torch::nn::Cloneable<InvertedResidualImpl> {
 public:
  InvertedResidualImpl(std::string branch_name, std::function<torch::nn::Sequential()> build_branch, bool residual,
                       double stochastic_depth = 0);
  void reset() override;
  torch::Tensor forward(const torch::Tensor& x);

 private:
  std::string branch_name_;
  std::function<torch::nn::Sequential()> build_branch_;
  bool residual_;
  double stochastic_depth_;
  torch::nn::Sequential branch_{nullptr};
  StochasticDepth drop_{nullptr};  // null unless residual_ and stochastic_depth_ > 0
};
TORCH_MODULE(InvertedResidual);

}  // namespace dpt::models
