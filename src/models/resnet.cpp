#include "dptrain/models/resnet.h"

#include <string>

#include <torch/nn/init.h>

#include "dptrain/common/error.h"
#include "dptrain/models/batch_norm_relu.h"
#include "dptrain/models/max_pool.h"

namespace dpt::models {

namespace nn = torch::nn;

ResNetImpl::ResNetImpl(ResNetLayout layout_, ResNetOptions options_)
    : layout(std::move(layout_)), options(std::move(options_)) {
  reset();
}

void ResNetImpl::reset() {
  DPT_CHECK(!layout.depths().empty() && layout.depths().size() == layout.widths().size(), ConfigError,
            "a ResNet layout needs one width per stage, got ", layout.depths().size(), " depths and ",
            layout.widths().size(), " widths");
  DPT_CHECK(options.num_classes() > 0, ConfigError, "num_classes must be positive, got ",
            options.num_classes());
  const bool imagenet = layout.stem() == Stem::ImageNet;
  int64_t channels = layout.widths()[0];
  conv1_ = register_module(
      "conv1", nn::Conv2d(nn::Conv2dOptions(3, channels, imagenet ? 7 : 3)
                              .stride(imagenet ? 2 : 1)
                              .padding(imagenet ? 3 : 1)
                              .bias(false)));
  bn1_ = make_norm(options.norm_layer(), channels);
  register_module("bn1", bn1_.ptr());
  stages_.clear();
  for (size_t i = 0; i < layout.depths().size(); ++i) {
    auto stage = make_stage(channels, layout.widths()[i], layout.depths()[i], i == 0 ? 1 : 2);
    stages_.push_back(register_module("layer" + std::to_string(i + 1), stage));
  }
  fc_ = register_module("fc", nn::Linear(channels, options.num_classes()));
  initialise();
}

nn::Sequential ResNetImpl::make_stage(int64_t& in_channels, int64_t width, int64_t depth,
                                      int64_t stride) {
  DPT_CHECK(depth > 0 && width > 0, ConfigError, "every ResNet stage needs at least one block and a ",
            "positive width, got depth ", depth, " and width ", width);
  nn::Sequential stage;
  for (int64_t i = 0; i < depth; ++i) {
    auto block = BlockOptions(in_channels, width)
                     .stride(i == 0 ? stride : 1)
                     .shortcut(layout.shortcut())
                     .norm_layer(options.norm_layer())
                     .groups(layout.groups())
                     .base_width(layout.width_per_group());
    if (layout.block() == BlockKind::Basic) {
      stage->push_back(BasicBlock(block));
    } else {
      stage->push_back(Bottleneck(block));
    }
    in_channels = width * expansion(layout.block());
  }
  return stage;
}

void ResNetImpl::initialise() {
  torch::NoGradGuard no_grad;
  const auto all = modules(/*include_self=*/false);
  for (const auto& module : all) {
    if (auto* conv = module->as<nn::Conv2d>()) {
      nn::init::kaiming_normal_(conv->weight, 0, torch::kFanOut, torch::kReLU);
    }
    // torchvision also sets BatchNorm's and GroupNorm's weights to 1 and biases to 0: every norm
    // layer's own reset() has already done so, whatever the norm-layer factory made.
  }
  // After the loop above, which would otherwise set the zeroed weights back to one.
  if (!options.zero_init_residual()) return;
  for (const auto& module : all) {
    if (auto* basic = module->as<BasicBlock>()) basic->zero_init_last_norm();
    if (auto* bottleneck = module->as<Bottleneck>()) bottleneck->zero_init_last_norm();
  }
}

void ResNetImpl::replace_norm_layer(const std::string& name, torch::nn::AnyModule layer, NormLayer factory) {
  DPT_CHECK(name == "bn1", ConfigError, "ResNet has no norm layer '", name, "' of its own (it has bn1; the ",
            "blocks in layer1... hold the others)");
  swap_norm_layer(*this, name, bn1_, std::move(layer), std::move(factory), options.norm_layer());
}

torch::Tensor ResNetImpl::forward(torch::Tensor x) {
  x = norm_relu(bn1_, conv1_(x));
  if (layout.stem() == Stem::ImageNet) {
    x = max_pool(x, /*kernel_size=*/{3, 3}, /*stride=*/{2, 2}, /*padding=*/{1, 1});
  }
  for (auto& stage : stages_) x = stage->forward(x);
  x = torch::adaptive_avg_pool2d(x, {1, 1}).flatten(1);
  return fc_(x);
}

namespace {

// Bottleneck depths of ResNet-50 and ResNet-101, which ResNeXt and Wide ResNet share.
const std::vector<int64_t> kDepths50 = {3, 4, 6, 3};
const std::vector<int64_t> kDepths101 = {3, 4, 23, 3};

ResNet imagenet_resnet(BlockKind block, std::vector<int64_t> depths, const ResNetOptions& options,
                       int64_t groups = 1, int64_t width_per_group = 64) {
  return ResNet(
      ResNetLayout().block(block).depths(std::move(depths)).groups(groups).width_per_group(width_per_group),
      options);
}

}  // namespace

ResNet resnet18(const ResNetOptions& options) {
  return imagenet_resnet(BlockKind::Basic, {2, 2, 2, 2}, options);
}
ResNet resnet34(const ResNetOptions& options) {
  return imagenet_resnet(BlockKind::Basic, {3, 4, 6, 3}, options);
}
ResNet resnet50(const ResNetOptions& options) {
  return imagenet_resnet(BlockKind::Bottleneck, kDepths50, options);
}
ResNet resnet101(const ResNetOptions& options) {
  return imagenet_resnet(BlockKind::Bottleneck, kDepths101, options);
}
ResNet resnet152(const ResNetOptions& options) {
  return imagenet_resnet(BlockKind::Bottleneck, {3, 8, 36, 3}, options);
}

ResNet resnext50_32x4d(const ResNetOptions& options) {
  return imagenet_resnet(BlockKind::Bottleneck, kDepths50, options, 32, 4);
}
ResNet resnext101_32x8d(const ResNetOptions& options) {
  return imagenet_resnet(BlockKind::Bottleneck, kDepths101, options, 32, 8);
}
ResNet resnext101_64x4d(const ResNetOptions& options) {
  return imagenet_resnet(BlockKind::Bottleneck, kDepths101, options, 64, 4);
}
ResNet wide_resnet50_2(const ResNetOptions& options) {
  return imagenet_resnet(BlockKind::Bottleneck, kDepths50, options, 1, 128);
}
ResNet wide_resnet101_2(const ResNetOptions& options) {
  return imagenet_resnet(BlockKind::Bottleneck, kDepths101, options, 1, 128);
}

ResNet cifar_resnet(int64_t depth, const ResNetOptions& options) {
  DPT_CHECK(depth >= 8 && (depth - 2) % 6 == 0, ConfigError,
            "a CIFAR ResNet has depth 6n+2 (20, 32, 44, 56, 110, ...), got ", depth);
  const int64_t n = (depth - 2) / 6;
  return ResNet(ResNetLayout()
                    .block(BlockKind::Basic)
                    .depths({n, n, n})
                    .widths({16, 32, 64})
                    .stem(Stem::Cifar)
                    .shortcut(Shortcut::ZeroPad),
                options);
}
ResNet resnet20(const ResNetOptions& options) { return cifar_resnet(20, options); }
ResNet resnet56(const ResNetOptions& options) { return cifar_resnet(56, options); }

}  // namespace dpt::models
