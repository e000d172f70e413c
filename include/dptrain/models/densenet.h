#pragma once
// DenseNet (Huang et al. 2017) as torchvision builds it: every layer of a dense block sees the
// concatenation of all earlier outputs of the block; transitions halve channels and resolution.
//
//   auto net = dpt::models::densenet(121, dpt::models::ClassifierOptions().num_classes(10));
//   // state dict: features.conv0.weight, features.denseblock1.denselayer1.norm1.weight, ...,
//   //             features.transition1.conv.weight, features.norm5.bias, classifier.weight

#include <cstdint>
#include <vector>

#include <torch/nn/cloneable.h>
#include <torch/nn/modules/container/sequential.h>
#include <torch/nn/modules/linear.h>
#include <torch/nn/pimpl.h>

#include "dptrain/models/classifier.h"
#include "dptrain/models/layers.h"

namespace dpt::models {

// One dense block: `layers` bottleneck layers (norm, ReLU, 1x1 conv to bottleneck x growth
// channels, norm, ReLU, 3x3 conv to `growth` channels), each fed the block's input and every
// earlier layer's output, concatenated; the block returns all of them concatenated.
class DenseBlockImpl : public torch::nn::Cloneable<DenseBlockImpl> {
 public:
  DenseBlockImpl(int64_t layers, int64_t in_channels, int64_t growth, int64_t bottleneck, double dropout,
                 NormLayer norm_layer);
  void reset() override;
  torch::Tensor forward(const torch::Tensor& x);

 private:
  int64_t layers_, in_channels_, growth_, bottleneck_;
  double dropout_;
  NormLayer norm_layer_;
  // Stacks (named Sequentials, as torchvision's _DenseLayer), so convert_sync_batchnorm reaches
  // their norms.
  std::vector<Stack> dense_layers_;
};
TORCH_MODULE(DenseBlock);

// torchvision's DenseNet: `features` (stem conv0/norm0/relu0/pool0, denseblockN, transitionN,
// norm5), then ReLU, global average pooling and the linear `classifier`.
class DenseNetImpl : public torch::nn::Cloneable<DenseNetImpl> {
 public:
  DenseNetImpl(int64_t growth, std::vector<int64_t> block_layers, int64_t stem_channels, ClassifierOptions options);
  void reset() override;
  torch::Tensor forward(const torch::Tensor& images);

 private:
  int64_t growth_;
  std::vector<int64_t> block_layers_;
  int64_t stem_channels_;
  ClassifierOptions options_;
  Stack features_{nullptr};  // named children: a Stack keeps their names in clones
  torch::nn::Linear classifier_{nullptr};
};
TORCH_MODULE(DenseNet);

// depth: 121, 161, 169 or 201. Dropout inside the dense layers (torchvision's drop_rate) is the
// options' dropout, 0 by default.
DenseNet densenet(int depth, const ClassifierOptions& options);

}  // namespace dpt::models
