#pragma once
// ResNets whose parameter and buffer names, order and initialisation follow torchvision 0.14, so
// state dicts move between dptrain and Python without renaming.
//
//   auto model = dpt::models::resnet50(dpt::models::ResNetOptions().num_classes(100));
//   auto logits = model(images);                      // [N, 3, H, W] -> [N, 100]
//   auto small = dpt::models::resnet20(dpt::models::ResNetOptions().num_classes(10));  // CIFAR
//
// Every module here is Cloneable, so `model->clone(device)` gives an independent deep copy.

#include <cstdint>
#include <string>
#include <vector>

#include <torch/arg.h>
#include <torch/nn/cloneable.h>
#include <torch/nn/modules/container/sequential.h>
#include <torch/nn/modules/conv.h>
#include <torch/nn/modules/linear.h>
#include <torch/nn/pimpl.h>

#include "dptrain/models/blocks.h"

namespace dpt::models {

// What the first layers look like before the residual stages.
enum class Stem {
  // 7x7 stride-2 convolution, norm, ReLU, 3x3 stride-2 max-pool (torchvision; 224px images).
  ImageNet,
  // 3x3 stride-1 convolution, norm, ReLU, no pooling (He et al. 2015 section 4.2; 32px images).
  Cifar,
};

// The shape of a ResNet: which block, how many per stage, how wide each stage is.
struct ResNetLayout {
  TORCH_ARG(BlockKind, block) = BlockKind::Basic;
  // Blocks per stage; stage i is registered as layer{i+1}.
  TORCH_ARG(std::vector<int64_t>, depths) = std::vector<int64_t>{2, 2, 2, 2};
  // Inner width per stage; every stage after the first halves the resolution.
  TORCH_ARG(std::vector<int64_t>, widths) = std::vector<int64_t>{64, 128, 256, 512};
  TORCH_ARG(Stem, stem) = Stem::ImageNet;
  // Identity-path adapter where a stage changes shape.
  TORCH_ARG(Shortcut, shortcut) = Shortcut::Projection;
  // Bottleneck blocks' grouped 3x3 convolutions (BlockOptions::groups, base_width): ResNeXt-50
  // 32x4d has 32 groups of width 4, Wide ResNet-50-2 one group of width 128.
  TORCH_ARG(int64_t, groups) = 1;
  TORCH_ARG(int64_t, width_per_group) = 64;
};

struct ResNetOptions {
  // Outputs of the final fully connected layer `fc`.
  TORCH_ARG(int64_t, num_classes) = 1000;
  // Start every residual branch at zero (its last norm's weight is 0), as torchvision's option;
  // helps large-batch training (Goyal et al. 2017).
  TORCH_ARG(bool, zero_init_residual) = false;
  // Factory for every norm layer; empty means BatchNorm2d.
  TORCH_ARG(NormLayer, norm_layer) = nullptr;
};

class ResNetImpl : public torch::nn::Cloneable<ResNetImpl>, public NormLayerHolder {
 public:
  ResNetImpl(ResNetLayout layout, ResNetOptions options);
  // (Re)creates all layers and initialises them like torchvision: Kaiming-normal (fan_out, ReLU)
  // convolutions, norm layers as their own reset() leaves them (BatchNorm's and GroupNorm's weight
  // 1 and bias 0, which torchvision sets again), LibTorch's default Linear.
  void reset() override;
  torch::Tensor forward(torch::Tensor x);
  // Swaps the stem's bn1 (see dpt::convert_sync_batchnorm); the blocks swap their own.
  void replace_norm_layer(const std::string& name, torch::nn::AnyModule layer, NormLayer factory) override;

  ResNetLayout layout;
  ResNetOptions options;

 private:
  torch::nn::Sequential make_stage(int64_t& in_channels, int64_t width, int64_t depth, int64_t stride);
  void initialise();

  torch::nn::Conv2d conv1_{nullptr};
  torch::nn::AnyModule bn1_;
  std::vector<torch::nn::Sequential> stages_;
  torch::nn::Linear fc_{nullptr};
};
TORCH_MODULE(ResNet);

// torchvision's ImageNet ResNets (basic blocks for 18/34, bottlenecks for 50/101/152).
ResNet resnet18(const ResNetOptions& options = ResNetOptions());
ResNet resnet34(const ResNetOptions& options = ResNetOptions());
ResNet resnet50(const ResNetOptions& options = ResNetOptions());
ResNet resnet101(const ResNetOptions& options = ResNetOptions());
ResNet resnet152(const ResNetOptions& options = ResNetOptions());

// torchvision's ResNeXt (Xie et al. 2017: grouped 3x3 convolutions, groups x width) and Wide
// ResNet (Zagoruyko and Komodakis 2016: bottlenecks twice as wide) at ResNet-50/101 depths.
ResNet resnext50_32x4d(const ResNetOptions& options = ResNetOptions());
ResNet resnext101_32x8d(const ResNetOptions& options = ResNetOptions());
ResNet resnext101_64x4d(const ResNetOptions& options = ResNetOptions());
ResNet wide_resnet50_2(const ResNetOptions& options = ResNetOptions());
ResNet wide_resnet101_2(const ResNetOptions& options = ResNetOptions());

// The CIFAR ResNets of He et al. 2015 (section 4.2): depth 6n+2 with n basic blocks in each of
// three stages of 16/32/64 channels, a 3x3 stem and no max-pool. Shortcuts are parameter-free
// (Shortcut::ZeroPad, the paper's option A), so ResNet-20 has 0.27M parameters as in the paper.
ResNet cifar_resnet(int64_t depth, const ResNetOptions& options = ResNetOptions());
ResNet resnet20(const ResNetOptions& options = ResNetOptions());
ResNet resnet56(const ResNetOptions& options = ResNetOptions());

}  // namespace dpt::models
