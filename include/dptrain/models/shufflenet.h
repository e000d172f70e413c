#pragma once
// ShuffleNetV2 (Ma et al. 2018) as torchvision builds it: channel split, two branches, channel
// shuffle; torchvision's names (conv1, stage2.N.branch1/branch2, conv5, fc) and PyTorch's default
// initialisation (torchvision sets none of its own).
//
//   auto net = dpt::models::shufflenet_v2("1_0", dpt::models::ClassifierOptions().num_classes(10));

#include <cstdint>
#include <ostream>
#include <string>
#include <vector>

#include <torch/nn/cloneable.h>
#include <torch/nn/modules/container/sequential.h>
#include <torch/nn/modules/linear.h>
#include <torch/nn/pimpl.h>

#include "dptrain/models/classifier.h"

namespace dpt::models {

class ShuffleNetV2Impl : public torch::nn::Cloneable<ShuffleNetV2Impl> {
 public:
  // stage_channels: conv1's, the three stages', conv5's (x1_0: 24, 116, 232, 464, 1024).
  ShuffleNetV2Impl(std::vector<int64_t> stage_channels, ClassifierOptions options);
  void reset() override;
  torch::Tensor forward(const torch::Tensor& images);
  void pretty_print(std::ostream& stream) const override { stream << "ShuffleNetV2"; }

  std::vector<int64_t> stage_channels;
  ClassifierOptions options;

 private:
  torch::nn::Sequential conv1_{nullptr}, conv5_{nullptr};
  std::vector<torch::nn::Sequential> stages_;
  torch::nn::Linear fc_{nullptr};
};
TORCH_MODULE(ShuffleNetV2);

// width: "0_5", "1_0", "1_5" or "2_0".
ShuffleNetV2 shufflenet_v2(const std::string& width, const ClassifierOptions& options);

}  // namespace dpt::models
