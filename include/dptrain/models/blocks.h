#pragma once
// The residual blocks ResNets are stacked from, with torchvision's child names, so a block's
// state-dict keys read conv1.weight, bn1.running_mean, ..., downsample.0.weight.
//
//   dpt::models::BasicBlock block(dpt::models::BlockOptions(64, 128).stride(2));
//   auto y = block(x);                       // [N, 64, H, W] -> [N, 128, H/2, W/2]
//   dpt::models::Bottleneck wide(dpt::models::BlockOptions(256, 64));   // 256 -> 64*4 channels

#include <cstdint>
#include <functional>
#include <string>

#include <torch/arg.h>
#include <torch/nn/cloneable.h>
#include <torch/nn/module.h>
#include <torch/nn/modules/container/any.h>
#include <torch/nn/modules/container/sequential.h>
#include <torch/nn/modules/conv.h>
#include <torch/nn/pimpl.h>

#include "dptrain/parallel/norm_layer_holder.h"

namespace dpt::models {

// Makes the normalisation layer for `num_features` channels. The default is BatchNorm2d; a
// data-parallel run can pass a factory for synchronised batch norm instead
// (dpt::sync_batch_norm_factory(comm)).
using NormLayer = std::function<torch::nn::AnyModule(int64_t num_features)>;

// A norm layer from `factory`, or BatchNorm2d with PyTorch's defaults (eps 1e-5, momentum 0.1)
// when the factory is empty.
torch::nn::AnyModule make_norm(const NormLayer& factory, int64_t num_features);

// The NormLayerHolder step shared by the blocks and the ResNet: `layer` becomes `owner`'s child
// `name` and the member `slot` forward() calls. A SyncBatchNorm also becomes what `factory`
// builds, so that reset() and clone() (which rebuilds from the options) keep synchronised norms.
void swap_norm_layer(torch::nn::Module& owner, const std::string& name, torch::nn::AnyModule& slot,
                     torch::nn::AnyModule layer, NormLayer& factory);

// How a block's identity path adapts when the block changes the resolution or channel count.
enum class Shortcut {
  // 1x1 convolution with the block's stride, then a norm layer ("option B" of He et al. 2015;
  // torchvision's `downsample`).
  Projection,
  // Parameter-free: take every stride-th pixel and zero-pad the new channels ("option A",
  // what the CIFAR ResNets of the paper use).
  ZeroPad,
};

struct BlockOptions {
  BlockOptions(int64_t in_channels, int64_t channels) : in_channels_(in_channels), channels_(channels) {}
  // Channels coming in.
  TORCH_ARG(int64_t, in_channels);
  // Width of the block's inner convolutions; the block outputs channels * expansion.
  TORCH_ARG(int64_t, channels);
  // Stride of the block's 3x3 convolution (2 halves the resolution).
  TORCH_ARG(int64_t, stride) = 1;
  // Identity-path adapter used when stride != 1 or the channel count changes.
  TORCH_ARG(Shortcut, shortcut) = Shortcut::Projection;
  // Factory for the norm layers; empty means BatchNorm2d.
  TORCH_ARG(NormLayer, norm_layer) = nullptr;
};

// The identity path of a ZeroPad shortcut: no parameters, so it adds no state-dict keys.
class ZeroPadShortcutImpl : public torch::nn::Cloneable<ZeroPadShortcutImpl> {
 public:
  ZeroPadShortcutImpl(int64_t stride, int64_t out_channels);
  void reset() override {}
  torch::Tensor forward(const torch::Tensor& x);

 private:
  int64_t stride_;
  int64_t out_channels_;
};
TORCH_MODULE(ZeroPadShortcut);

// Two 3x3 convolutions and a residual connection (ResNet-18/34, the CIFAR ResNets).
class BasicBlockImpl : public torch::nn::Cloneable<BasicBlockImpl>, public NormLayerHolder {
 public:
  static constexpr int64_t kExpansion = 1;

  explicit BasicBlockImpl(BlockOptions options);
  void reset() override;
  torch::Tensor forward(const torch::Tensor& x);
  // Sets the scale of the last norm layer to zero, so the block starts as the identity
  // (torchvision's zero_init_residual).
  void zero_init_last_norm();
  // Swaps bn1 or bn2 (see dpt::convert_sync_batchnorm); the downsample norm lives in a Sequential.
  void replace_norm_layer(const std::string& name, torch::nn::AnyModule layer) override;

  BlockOptions options;

 private:
  torch::nn::Conv2d conv1_{nullptr}, conv2_{nullptr};
  torch::nn::AnyModule bn1_, bn2_;
  torch::nn::Sequential downsample_{nullptr};  // null: identity shortcut
};
TORCH_MODULE(BasicBlock);

// 1x1 reduce, 3x3 (with the stride, as torchvision's "ResNet v1.5"), 1x1 expand by 4
// (ResNet-50/101/152).
class BottleneckImpl : public torch::nn::Cloneable<BottleneckImpl>, public NormLayerHolder {
 public:
  static constexpr int64_t kExpansion = 4;

  explicit BottleneckImpl(BlockOptions options);
  void reset() override;
  torch::Tensor forward(const torch::Tensor& x);
  // See BasicBlockImpl::zero_init_last_norm.
  void zero_init_last_norm();
  // Swaps bn1, bn2 or bn3 (see dpt::convert_sync_batchnorm).
  void replace_norm_layer(const std::string& name, torch::nn::AnyModule layer) override;

  BlockOptions options;

 private:
  torch::nn::Conv2d conv1_{nullptr}, conv2_{nullptr}, conv3_{nullptr};
  torch::nn::AnyModule bn1_, bn2_, bn3_;
  torch::nn::Sequential downsample_{nullptr};  // null: identity shortcut
};
TORCH_MODULE(Bottleneck);

}  // namespace dpt::models
