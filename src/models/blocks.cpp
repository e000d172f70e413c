#include "dptrain/models/blocks.h"

#include <array>

#include <torch/nn/functional/padding.h>
#include <torch/nn/modules/batchnorm.h>

#include "dptrain/common/error.h"
#include "dptrain/models/batch_norm_relu.h"

namespace dpt::models {
namespace {


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
  return torch::nn::Sequential(conv_before_norm(options.in_channels(), out_channels, 1, options.stride()),
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

}  // namespace

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

template <BlockKind Kind>
ResidualBlockImpl<Kind>::ResidualBlockImpl(BlockOptions options_) : options(std::move(options_)) {
  reset();
}

template <BlockKind Kind>
void ResidualBlockImpl<Kind>::pretty_print(std::ostream& stream) const {
  stream << kName;
}

template <BlockKind Kind>
void ResidualBlockImpl<Kind>::reset() {
  DPT_CHECK(Kind == BlockKind::Bottleneck || (options.groups() == 1 && options.base_width() == 64), ConfigError,
            "BasicBlock only supports groups=1 and base_width=64 (as torchvision), got groups=", options.groups(),
            " and base_width=", options.base_width());
  const int64_t out = options.channels() * kExpansion;
  // Integer division first, as torchvision's int(planes * (base_width / 64.)) * groups.
  const int64_t width = options.channels() * options.base_width() / 64 * options.groups();
  const int64_t groups = options.groups();
  // Kind's convolutions: {in, out, kernel, stride, groups}.
  const std::vector<std::array<int64_t, 5>> plan =
      Kind == BlockKind::Basic
          ? std::vector<std::array<int64_t, 5>>{{options.in_channels(), out, 3, options.stride(), 1}, {out, out, 3, 1, 1}}
          : std::vector<std::array<int64_t, 5>>{{options.in_channels(), width, 1, 1, 1},
                                                {width, width, 3, options.stride(), groups},
                                                {width, out, 1, 1, 1}};
  convs_.clear();
  norms_.clear();
  for (const auto& [in, channels, kernel, stride, conv_groups] : plan) {
    const std::string n = std::to_string(convs_.size() + 1);
    convs_.push_back(this->register_module("conv" + n, conv_before_norm(in, channels, kernel, stride, conv_groups)));
    norms_.push_back(norm(options, channels));
    this->register_module("bn" + n, norms_.back().ptr());
  }
  downsample_ = make_downsample(options, out);
  if (downsample_) this->register_module("downsample", downsample_);
}

template <BlockKind Kind>
torch::Tensor ResidualBlockImpl<Kind>::forward(const torch::Tensor& x) {
  torch::Tensor out = x;
  for (size_t i = 0; i + 1 < convs_.size(); ++i) out = norm_relu(norms_[i], convs_[i](out));
  out = convs_.back()(out);
  return norm_add_relu(norms_.back(), out, downsample_ ? downsample_->forward(x) : x);
}

template <BlockKind Kind>
void ResidualBlockImpl<Kind>::zero_init_last_norm() {
  zero_weight(norms_.back());
}

template <BlockKind Kind>
void ResidualBlockImpl<Kind>::replace_norm_layer(const std::string& name, torch::nn::AnyModule layer,
                                                 NormLayer factory) {
  std::string known;
  for (size_t i = 0; i < norms_.size(); ++i) {
    const std::string slot_name = "bn" + std::to_string(i + 1);
    if (name == slot_name) {
      swap_norm_layer(*this, name, norms_[i], std::move(layer), std::move(factory), options.norm_layer());
      return;
    }
    known += (known.empty() ? "" : ", ") + slot_name;
  }
  throw ConfigError(str(kName, " has no norm layer '", name, "' (it has ", known, ")"));
}

template class ResidualBlockImpl<BlockKind::Basic>;
template class ResidualBlockImpl<BlockKind::Bottleneck>;

}  // namespace dpt::models
