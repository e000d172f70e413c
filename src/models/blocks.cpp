#include "dptrain/models/blocks.h"

#include <torch/nn/functional/padding.h>
#include <torch/nn/modules/batchnorm.h>

#include "dptrain/common/error.h"
#include "dptrain/parallel/sync_batch_norm.h"

namespace dpt::models {
namespace {

torch::nn::Conv2d conv(int64_t in, int64_t out, int64_t kernel, int64_t stride) {
  // torchvision's convolutions inside blocks carry no bias: the norm layer after them has one.
  return torch::nn::Conv2d(torch::nn::Conv2dOptions(in, out, kernel)
                               .stride(stride)
                               .padding(kernel / 2)
                               .bias(false));
}

torch::nn::AnyModule norm(const BlockOptions& options, int64_t num_features) {
  return make_norm(options.norm_layer(), num_features);
}

// The identity path's adapter, or null when the block keeps shape (plain identity). Registered
// as `downsample`, so a projection's keys are downsample.0.weight and downsample.1.*.
torch::nn::Sequential make_downsample(const BlockOptions& options, int64_t out_channels) {
  if (options.stride() == 1 && options.in_channels() == out_channels) return nullptr;
  if (options.shortcut() == Shortcut::ZeroPad) {
    DPT_CHECK(out_channels >= options.in_channels(), ConfigError,
              "a ZeroPad shortcut can only add channels, but the block maps ",
              options.in_channels(), " channels to ", out_channels, "; use Shortcut::Projection");
    return torch::nn::Sequential(ZeroPadShortcut(options.stride(), out_channels));
  }
  return torch::nn::Sequential(conv(options.in_channels(), out_channels, 1, options.stride()),
                               norm(options, out_channels));
}

void zero_weight(torch::nn::AnyModule& norm_layer) {
  auto params = norm_layer.ptr()->named_parameters(/*recurse=*/false);
  auto* weight = params.find("weight");
  DPT_CHECK(weight != nullptr && weight->defined(), ConfigError,
            "zero_init_residual needs norm layers with a 'weight' parameter, but ",
            norm_layer.ptr()->name(), " has none; turn zero_init_residual off or use an affine norm");
  torch::NoGradGuard no_grad;
  weight->zero_();
}

// The member holding the norm layer `name` among `slots`; a ConfigError naming those there are
// otherwise.
torch::nn::AnyModule& norm_slot(const std::string& owner, const std::string& name,
                                std::initializer_list<std::pair<const char*, torch::nn::AnyModule*>> slots) {
  std::string known;
  for (const auto& [slot_name, slot] : slots) {
    if (name == slot_name) return *slot;
    known += str(known.empty() ? "" : ", ", slot_name);
  }
  throw ConfigError(str(owner, " has no norm layer '", name, "' (it has ", known, ")"));
}

torch::Tensor add_shortcut(const torch::Tensor& out, const torch::Tensor& x,
                           torch::nn::Sequential& downsample) {
  return torch::relu(out + (downsample ? downsample->forward(x) : x));
}

}  // namespace

torch::nn::AnyModule make_norm(const NormLayer& factory, int64_t num_features) {
  if (factory) return factory(num_features);
  return torch::nn::AnyModule(torch::nn::BatchNorm2d(num_features));
}

void swap_norm_layer(torch::nn::Module& owner, const std::string& name, torch::nn::AnyModule& slot,
                     torch::nn::AnyModule layer, NormLayer& factory) {
  if (auto* sync = layer.ptr()->as<SyncBatchNorm>()) {
    factory = sync_batch_norm_factory(sync->communicator(), sync->options);
  }
  slot = std::move(layer);
  owner.replace_module(name, slot.ptr());
}

ZeroPadShortcutImpl::ZeroPadShortcutImpl(int64_t stride, int64_t out_channels)
    : stride_(stride), out_channels_(out_channels) {}

torch::Tensor ZeroPadShortcutImpl::forward(const torch::Tensor& x) {
  using torch::indexing::Slice;
  auto sampled = x.index({Slice(), Slice(), Slice(0, torch::indexing::None, stride_),
                          Slice(0, torch::indexing::None, stride_)});
  // The new channels go half before and half after the old ones, as in the paper's CIFAR nets.
  const int64_t extra = out_channels_ - x.size(1);
  const int64_t before = extra / 2;
  namespace F = torch::nn::functional;
  return F::pad(sampled, F::PadFuncOptions({0, 0, 0, 0, before, extra - before}));
}

BasicBlockImpl::BasicBlockImpl(BlockOptions options_) : options(std::move(options_)) { reset(); }

void BasicBlockImpl::reset() {
  const int64_t out = options.channels() * kExpansion;
  conv1_ = register_module("conv1", conv(options.in_channels(), options.channels(), 3, options.stride()));
  bn1_ = norm(options, options.channels());
  register_module("bn1", bn1_.ptr());
  conv2_ = register_module("conv2", conv(options.channels(), out, 3, 1));
  bn2_ = norm(options, out);
  register_module("bn2", bn2_.ptr());
  downsample_ = make_downsample(options, out);
  if (downsample_) register_module("downsample", downsample_);
}

torch::Tensor BasicBlockImpl::forward(const torch::Tensor& x) {
  auto out = torch::relu(bn1_.forward(conv1_(x)));
  out = bn2_.forward(conv2_(out));
  return add_shortcut(out, x, downsample_);
}

void BasicBlockImpl::zero_init_last_norm() { zero_weight(bn2_); }

void BasicBlockImpl::replace_norm_layer(const std::string& name, torch::nn::AnyModule layer) {
  auto& slot = norm_slot("BasicBlock", name, {{"bn1", &bn1_}, {"bn2", &bn2_}});
  swap_norm_layer(*this, name, slot, std::move(layer), options.norm_layer());
}

BottleneckImpl::BottleneckImpl(BlockOptions options_) : options(std::move(options_)) { reset(); }

void BottleneckImpl::reset() {
  const int64_t width = options.channels();
  const int64_t out = options.channels() * kExpansion;
  conv1_ = register_module("conv1", conv(options.in_channels(), width, 1, 1));
  bn1_ = norm(options, width);
  register_module("bn1", bn1_.ptr());
  conv2_ = register_module("conv2", conv(width, width, 3, options.stride()));
  bn2_ = norm(options, width);
  register_module("bn2", bn2_.ptr());
  conv3_ = register_module("conv3", conv(width, out, 1, 1));
  bn3_ = norm(options, out);
  register_module("bn3", bn3_.ptr());
  downsample_ = make_downsample(options, out);
  if (downsample_) register_module("downsample", downsample_);
}

torch::Tensor BottleneckImpl::forward(const torch::Tensor& x) {
  auto out = torch::relu(bn1_.forward(conv1_(x)));
  out = torch::relu(bn2_.forward(conv2_(out)));
  out = bn3_.forward(conv3_(out));
  return add_shortcut(out, x, downsample_);
}

void BottleneckImpl::zero_init_last_norm() { zero_weight(bn3_); }

void BottleneckImpl::replace_norm_layer(const std::string& name, torch::nn::AnyModule layer) {
  auto& slot = norm_slot("Bottleneck", name, {{"bn1", &bn1_}, {"bn2", &bn2_}, {"bn3", &bn3_}});
  swap_norm_layer(*this, name, slot, std::move(layer), options.norm_layer());
}

}  // namespace dpt::models
