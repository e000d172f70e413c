#include "dptrain/models/layers.h"

#include <cmath>

#include <torch/nn/init.h>
#include <torch/nn/modules/batchnorm.h>
#include <torch/nn/modules/linear.h>
#include <torch/nn/modules/normalization.h>

#include "dptrain/common/error.h"

namespace dpt::models {

namespace nn = torch::nn;

nn::AnyModule make_norm(const NormLayer& factory, int64_t num_features) {
  if (factory) return factory(num_features);
  return nn::AnyModule(nn::BatchNorm2d(num_features));
}

NormLayer batch_norm(const NormLayer& factory, double eps, double momentum) {
  if (factory) return factory;
  return [eps, momentum](int64_t num_features) {
    return nn::AnyModule(nn::BatchNorm2d(nn::BatchNormOptions(num_features).eps(eps).momentum(momentum)));
  };
}

void swap_norm_layer(nn::Module& owner, const std::string& name, nn::AnyModule& slot, nn::AnyModule layer,
                     NormLayer layer_factory, NormLayer& factory) {
  factory = std::move(layer_factory);
  slot = std::move(layer);
  owner.replace_module(name, slot.ptr());
}

int64_t make_divisible(double value, int64_t divisor) {
  auto rounded = std::max<int64_t>(divisor, static_cast<int64_t>(value + divisor / 2.0) / divisor * divisor);
  if (static_cast<double>(rounded) < 0.9 * value) rounded += divisor;
  return rounded;
}

torch::Tensor activate(Activation kind, const torch::Tensor& x) {
  switch (kind) {
    case Activation::None: return x;
    case Activation::ReLU: return torch::relu(x);
    case Activation::ReLU6: return torch::hardtanh(x, 0, 6);
    case Activation::Hardswish: return torch::hardswish(x);
    case Activation::Hardsigmoid: return torch::hardsigmoid(x);
    case Activation::SiLU: return torch::silu(x);
    case Activation::GELU: return torch::gelu(x);
    case Activation::Sigmoid: return torch::sigmoid(x);
  }
  DPT_ASSERT(false, "unknown activation ", static_cast<int>(kind));
  return x;
}

torch::Tensor ActivationLayerImpl::forward(torch::Tensor x) {
  if (!inplace_) return activate(kind_, x);
  switch (kind_) {
    case Activation::ReLU: return torch::relu_(x);
    case Activation::ReLU6: return torch::hardtanh_(x, 0, 6);
    case Activation::Hardswish: return torch::hardswish_(x);
    case Activation::SiLU: return torch::silu_(x);
    default: return activate(kind_, x);
  }
}

void ActivationLayerImpl::pretty_print(std::ostream& stream) const {
  static const char* const names[] = {"Identity", "ReLU", "ReLU6", "Hardswish", "Hardsigmoid", "SiLU", "GELU",
                                      "Sigmoid"};
  stream << names[static_cast<int>(kind_)];
}

std::shared_ptr<nn::Module> StackImpl::clone(const c10::optional<torch::Device>& device) const {
  // Unlike SequentialImpl::clone, keeps the children's names (DenseNet's are conv0, norm0, ...).
  auto copy = std::make_shared<StackImpl>();
  const auto names = named_children().keys();
  size_t i = 0;
  for (const auto& module : *this) copy->push_back(names[i++], module.clone(device));
  copy->train(is_training());
  return copy;
}

nn::Conv2d conv_before_norm(int64_t in, int64_t out, int64_t kernel, int64_t stride, int64_t groups) {
  return nn::Conv2d(nn::Conv2dOptions(in, out, kernel).stride(stride).padding(kernel / 2).groups(groups).bias(false));
}

nn::MaxPool2d max_pool(int64_t kernel, int64_t stride, bool ceil_mode, int64_t padding) {
  return nn::MaxPool2d(nn::MaxPool2dOptions(kernel).stride(stride).ceil_mode(ceil_mode).padding(padding));
}

Stack conv_norm_activation(const ConvNormActivationOptions& options) {
  const int64_t padding = options.padding().value_or((options.kernel_size() - 1) / 2);
  Stack layers(nn::Conv2d(nn::Conv2dOptions(options.in_channels(), options.out_channels(),
                                                     options.kernel_size())
                                       .stride(options.stride())
                                       .padding(padding)
                                       .groups(options.groups())
                                       .bias(!options.norm())));
  if (options.norm()) layers->push_back(make_norm(options.norm_layer(), options.out_channels()));
  // In place: the norm's output is needed by nothing else (torchvision's inplace=True).
  if (options.activation() != Activation::None) layers->push_back(ActivationLayer(options.activation(), true));
  return layers;
}

Stack conv_norm_activation(int64_t in, int64_t out, int64_t kernel, int64_t stride, int64_t groups,
                           Activation activation, const NormLayer& norm_layer) {
  return conv_norm_activation(ConvNormActivationOptions(in, out)
                                  .kernel_size(kernel)
                                  .stride(stride)
                                  .groups(groups)
                                  .norm_layer(norm_layer)
                                  .activation(activation));
}

SqueezeExcitationImpl::SqueezeExcitationImpl(int64_t channels, int64_t squeeze_channels, Activation activation,
                                             Activation scale, std::array<std::string, 2> names)
    : channels_(channels),
      squeeze_channels_(squeeze_channels),
      activation_(activation),
      scale_(scale),
      names_(std::move(names)) {
  reset();
}

void SqueezeExcitationImpl::reset() {
  fc1_ = register_module(names_[0], nn::Conv2d(nn::Conv2dOptions(channels_, squeeze_channels_, 1)));
  fc2_ = register_module(names_[1], nn::Conv2d(nn::Conv2dOptions(squeeze_channels_, channels_, 1)));
}

torch::Tensor SqueezeExcitationImpl::forward(const torch::Tensor& x) {
  auto scale = torch::adaptive_avg_pool2d(x, {1, 1});
  scale = activate(scale_, fc2_(activate(activation_, fc1_(scale))));
  return scale * x;
}

torch::Tensor StochasticDepthImpl::forward(const torch::Tensor& x) {
  if (!is_training() || p_ == 0) return x;
  const double survival = 1 - p_;
  std::vector<int64_t> shape(x.dim(), 1);
  shape[0] = x.size(0);
  auto noise = torch::empty(shape, x.options()).bernoulli_(survival);
  if (survival > 0) noise.div_(survival);
  return x * noise;
}

void StochasticDepthImpl::pretty_print(std::ostream& stream) const {
  stream << "StochasticDepth(p=" << p_ << ", mode=row)";
}

torch::Tensor GlobalAvgPoolImpl::forward(const torch::Tensor& x) {
  return torch::adaptive_avg_pool2d(x, {1, 1});
}

void LayerNorm2dImpl::reset() {
  weight = register_parameter("weight", torch::ones({channels_}));
  bias = register_parameter("bias", torch::zeros({channels_}));
}

torch::Tensor LayerNorm2dImpl::forward(const torch::Tensor& x) {
  return torch::layer_norm(x.permute({0, 2, 3, 1}), {channels_}, weight, bias, eps_).permute({0, 3, 1, 2});
}

void LayerNorm2dImpl::pretty_print(std::ostream& stream) const {
  stream << "LayerNorm2d(" << channels_ << ", eps=" << eps_ << ")";
}

void trunc_normal_(torch::Tensor tensor, double std, double a, double b) {
  auto cdf = [](double x) { return (1 + std::erf(x / std::sqrt(2.0))) / 2; };
  torch::NoGradGuard no_grad;
  const double inside = cdf(b / std) - cdf(a / std);
  if (inside < 0.5) {
    // Inverse-CDF sampling (torch.nn.init's way): uniform between the bounds' CDF values, mapped
    // back through erfinv. Exact for any bounds, but erfinv costs 8x a normal draw.
    tensor.uniform_(2 * cdf(a / std) - 1, 2 * cdf(b / std) - 1);
    tensor.erfinv_().mul_(std * std::sqrt(2.0)).clamp_(a, b);
    return;
  }
  // Rejection: normal draws, drawn again where they fell outside. The same distribution; the
  // models' bounds (+-2 at a std of 0.02 or less) reject almost nothing, and building ConvNeXt-L
  // took 14 s through erfinv.
  tensor.normal_(0, std);
  for (auto outside = tensor.lt(a).logical_or_(tensor.gt(b)); outside.any().item<bool>();
       outside = tensor.lt(a).logical_or_(tensor.gt(b))) {
    tensor.masked_scatter_(outside, torch::empty({outside.sum().item<int64_t>()}, tensor.options()).normal_(0, std));
  }
}

void init_truncated_normal(nn::Module& module, double std, bool zero_biases) {
  torch::NoGradGuard no_grad;
  for (const auto& m : module.modules()) {
    torch::Tensor weight, bias;
    if (auto* conv = m->as<nn::Conv2d>()) {
      weight = conv->weight;
      bias = conv->bias;
    } else if (auto* linear = m->as<nn::Linear>()) {
      weight = linear->weight;
      bias = linear->bias;
    } else {
      continue;
    }
    trunc_normal_(weight, std);
    if (zero_biases && bias.defined()) bias.zero_();
  }
}

void init_like_torchvision(nn::Module& network, LinearInit linear) {
  torch::NoGradGuard no_grad;
  for (const auto& module : network.modules(/*include_self=*/false)) {
    if (auto* conv = module->as<nn::Conv2d>()) {
      nn::init::kaiming_normal_(conv->weight, 0, torch::kFanOut, torch::kReLU);
      if (conv->bias.defined()) conv->bias.zero_();
    } else if (auto* fc = module->as<nn::Linear>()) {
      if (linear == LinearInit::Normal) {
        fc->weight.normal_(0, 0.01);
      } else {
        const double range = 1.0 / std::sqrt(static_cast<double>(fc->weight.size(0)));
        fc->weight.uniform_(-range, range);
      }
      fc->bias.zero_();
    }
    // Batch and group norms: their own reset() already set weight 1 and bias 0, whatever the
    // norm-layer factory made.
  }
}

}  // namespace dpt::models
