#pragma once
// The residual blocks ResNets are stacked from, with torchvision's child names, so a block's
// state-dict keys read conv1.weight, bn1.running_mean, ..., downsample.0.weight.
//
//   dpt::models::BasicBlock block(dpt::models::BlockOptions(64, 128).stride(2));
//   auto y = block(x);                       // [N, 64, H, W] -> [N, 128, H/2, W/2]
//   dpt::models::Bottleneck wide(dpt::models::BlockOptions(256, 64));   // 256 -> 64*4 channels

#include <cstdint>
#include <functional>
#include <ostream>
#include <string>
#include <vector>

#include <torch/arg.h>
#include <torch/nn/cloneable.h>
#include <torch/nn/module.h>
#include <torch/nn/modules/container/any.h>
#include <torch/nn/modules/container/sequential.h>
#include <torch/nn/modules/conv.h>
#include <torch/nn/pimpl.h>

#include "dptrain/models/layers.h"
#include "dptrain/models/norm_layer_holder.h"

namespace dpt::models {

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
  // Bottleneck only (torchvision's ResNeXt and Wide ResNet): the 3x3 convolution has `groups`
  // groups of `base_width` * channels / 64 channels each, so its width is
  // channels * base_width / 64 * groups; the block still outputs 4 x channels.
  TORCH_ARG(int64_t, groups) = 1;
  TORCH_ARG(int64_t, base_width) = 64;
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

// The two residual blocks of torchvision's ResNets:
//  - Basic: two 3x3 convolutions (ResNet-18/34, the CIFAR ResNets); outputs `channels`.
//  - Bottleneck: 1x1 reduce, 3x3 (with the stride, as torchvision's "ResNet v1.5"), 1x1 expand by
//    4 (ResNet-50/101/152); outputs 4 x `channels`.
// Each convolution is followed by a norm layer, all but the last by a ReLU; the shortcut is added
// before the final ReLU.
enum class BlockKind { Basic, Bottleneck };

// How many times `channels` a block of `kind` outputs.
constexpr int64_t expansion(BlockKind kind) { return kind == BlockKind::Basic ? 1 : 4; }

template <BlockKind Kind>
class ResidualBlockImpl : public torch::nn::Cloneable<ResidualBlockImpl<Kind>>, public NormLayerHolder {
 public:
  static constexpr int64_t kExpansion = expansion(Kind);
  // torchvision's class name, for messages and printing (name() would spell out the template).
  static constexpr const char* kName = Kind == BlockKind::Basic ? "BasicBlock" : "Bottleneck";

  explicit ResidualBlockImpl(BlockOptions options);
  void reset() override;
  torch::Tensor forward(const torch::Tensor& x);
  void pretty_print(std::ostream& stream) const override;
  // Sets the scale of the last norm layer to zero, so the block starts as the identity
  // (torchvision's zero_init_residual).
  void zero_init_last_norm();
  // Swaps bn1, bn2 (, bn3) (see dpt::convert_sync_batchnorm); the downsample norm lives in a
  // Sequential.
  void replace_norm_layer(const std::string& name, torch::nn::AnyModule layer, NormLayer factory) override;

  BlockOptions options;

 private:
  // conv1, conv2 (, conv3) and their norm layers bn1, bn2 (, bn3), in the order forward() runs.
  std::vector<torch::nn::Conv2d> convs_;
  std::vector<torch::nn::AnyModule> norms_;
  torch::nn::Sequential downsample_{nullptr};  // null: identity shortcut
};

using BasicBlockImpl = ResidualBlockImpl<BlockKind::Basic>;
using BottleneckImpl = ResidualBlockImpl<BlockKind::Bottleneck>;
TORCH_MODULE(BasicBlock);
TORCH_MODULE(Bottleneck);

}  // namespace dpt::models
