#pragma once
// The small layers torchvision's families are assembled from (torchvision.ops.misc and
// stochastic_depth), with the same child names, so the families' state dicts match:
//
//   auto stem = dpt::models::conv_norm_activation(dpt::models::ConvNormActivationOptions(3, 32).stride(2));
//   // stem->named_parameters(): 0.weight, 1.weight, 1.bias (conv, norm; the activation has none)
//   dpt::models::SqueezeExcitation se(96, 24);            // fc1.weight/bias, fc2.weight/bias
//   dpt::models::StochasticDepth drop(0.2);               // drops whole rows in training

#include <array>
#include <cstdint>
#include <functional>
#include <optional>
#include <ostream>
#include <string>
#include <utility>
#include <vector>

#include <torch/arg.h>
#include <torch/nn/cloneable.h>
#include <torch/nn/module.h>
#include <torch/nn/modules/container/any.h>
#include <torch/nn/modules/container/sequential.h>
#include <torch/nn/modules/conv.h>
#include <torch/nn/modules/pooling.h>
#include <torch/nn/pimpl.h>

#include "dptrain/models/norm_layer_holder.h"

namespace dpt::models {

// Makes the normalisation layer for `num_features` channels. The default is BatchNorm2d; a
// data-parallel run can pass a factory for synchronised batch norm instead
// (dpt::sync_batch_norm_factory(comm)).
using NormLayer = NormLayerFactory;

// A norm layer from `factory`, or BatchNorm2d with PyTorch's defaults (eps 1e-5, momentum 0.1)
// when the factory is empty.
torch::nn::AnyModule make_norm(const NormLayer& factory, int64_t num_features);

// A factory for BatchNorm2d with other eps and momentum (EfficientNet: eps 1e-3; MobileNetV3:
// eps 1e-3, momentum 0.01), or `factory` itself when one is given.
NormLayer batch_norm(const NormLayer& factory, double eps, double momentum = 0.1);

// The NormLayerHolder step shared by modules that hold a norm layer in a member: `layer` becomes
// `owner`'s child `name` and the member `slot` forward() calls, and `layer_factory` becomes
// `factory`, the options' norm_layer, so that reset() and clone() (which rebuilds from the
// options) keep the swapped kind of layer.
void swap_norm_layer(torch::nn::Module& owner, const std::string& name, torch::nn::AnyModule& slot,
                     torch::nn::AnyModule layer, NormLayer layer_factory, NormLayer& factory);

// torchvision's _make_divisible: `value` rounded to the nearest multiple of `divisor`, at least
// `divisor`, and never more than 10% below `value` (MobileNet and EfficientNet channel counts).
int64_t make_divisible(double value, int64_t divisor = 8);

enum class Activation { None, ReLU, ReLU6, Hardswish, Hardsigmoid, SiLU, GELU, Sigmoid };

// A parameter-free activation. `inplace` overwrites the input (torchvision's inplace=True after a
// norm layer, which saves the memory of one activation map per layer).
class ActivationLayerImpl : public torch::nn::Cloneable<ActivationLayerImpl> {
 public:
  explicit ActivationLayerImpl(Activation kind, bool inplace = false) : kind_(kind), inplace_(inplace) {}
  void reset() override {}
  torch::Tensor forward(torch::Tensor x);
  void pretty_print(std::ostream& stream) const override;

 private:
  Activation kind_;
  bool inplace_;
};
TORCH_MODULE(ActivationLayer);

// ReLU in place, as torchvision's ReLU(inplace=True) after a norm layer or convolution.
inline ActivationLayer relu_inplace() { return ActivationLayer(Activation::ReLU, /*inplace=*/true); }

// `x` through `kind` (not in place).
torch::Tensor activate(Activation kind, const torch::Tensor& x);

// A torch::nn::Sequential whose forward maps a tensor to a tensor, so that it can sit inside
// another Sequential (LibTorch's AnyModule cannot hold Sequential's templated forward). Its
// children are named 0, 1, ... like any Sequential's unless pushed with names, which its clone()
// keeps (Sequential's does not), and convert_sync_batchnorm swaps its norms.
class StackImpl : public torch::nn::SequentialImpl {
 public:
  using SequentialImpl::SequentialImpl;
  torch::Tensor forward(torch::Tensor x) { return SequentialImpl::forward(x); }
  // A Stack with the same child names, not the SequentialImpl that Sequential's clone() makes: a
  // Sequential holding this one clones it through AnyModule, which casts the clone back to StackImpl.
  std::shared_ptr<torch::nn::Module> clone(const c10::optional<torch::Device>& device = c10::nullopt) const override;
};
TORCH_MODULE(Stack);

// The convolution torchvision puts before a norm layer: no bias (the norm has one), padded by
// kernel / 2, which keeps the size at stride 1.
torch::nn::Conv2d conv_before_norm(int64_t in, int64_t out, int64_t kernel, int64_t stride = 1, int64_t groups = 1);

// Max pooling with torchvision's arguments.
torch::nn::MaxPool2d max_pool(int64_t kernel, int64_t stride, bool ceil_mode = false, int64_t padding = 0);

struct ConvNormActivationOptions {
  ConvNormActivationOptions(int64_t in_channels, int64_t out_channels)
      : in_channels_(in_channels), out_channels_(out_channels) {}
  TORCH_ARG(int64_t, in_channels);
  TORCH_ARG(int64_t, out_channels);
  TORCH_ARG(int64_t, kernel_size) = 3;
  TORCH_ARG(int64_t, stride) = 1;
  TORCH_ARG(int64_t, groups) = 1;
  // Unset: (kernel_size - 1) / 2, which keeps the size at stride 1.
  TORCH_ARG(std::optional<int64_t>, padding) = std::nullopt;
  // Add a norm layer (made by norm_layer) after the convolution; without one the convolution
  // gets a bias.
  TORCH_ARG(bool, norm) = true;
  TORCH_ARG(NormLayer, norm_layer) = nullptr;
  TORCH_ARG(Activation, activation) = Activation::ReLU;
};

// torchvision's Conv2dNormActivation: Sequential(conv "0", norm "1", activation "2"), the norm and
// the activation left out when not wanted.
Stack conv_norm_activation(const ConvNormActivationOptions& options);
// The same, for the families' many calls that set all of these.
Stack conv_norm_activation(int64_t in, int64_t out, int64_t kernel, int64_t stride, int64_t groups,
                           Activation activation, const NormLayer& norm_layer);

// torchvision.ops.SqueezeExcitation: x * scale(fc2(act(fc1(avg_pool(x))))), with 1x1 convolutions
// fc1 (channels -> squeeze_channels) and fc2 back, registered under `names` (GhostNet's reference
// model calls them conv_reduce and conv_expand).
class SqueezeExcitationImpl : public torch::nn::Cloneable<SqueezeExcitationImpl> {
 public:
  SqueezeExcitationImpl(int64_t channels, int64_t squeeze_channels, Activation activation = Activation::ReLU,
                        Activation scale = Activation::Sigmoid,
                        std::array<std::string, 2> names = {"fc1", "fc2"});
  void reset() override;
  torch::Tensor forward(const torch::Tensor& x);

 private:
  int64_t channels_, squeeze_channels_;
  Activation activation_, scale_;
  std::array<std::string, 2> names_;
  torch::nn::Conv2d fc1_{nullptr}, fc2_{nullptr};
};
TORCH_MODULE(SqueezeExcitation);

// torchvision.ops.StochasticDepth in "row" mode: in training, each sample's input is zeroed with
// probability p and the others scaled by 1/(1-p); the identity in eval mode or with p == 0.
class StochasticDepthImpl : public torch::nn::Cloneable<StochasticDepthImpl> {
 public:
  explicit StochasticDepthImpl(double p) : p_(p) {}
  void reset() override {}
  torch::Tensor forward(const torch::Tensor& x);
  void pretty_print(std::ostream& stream) const override;

 private:
  double p_;
};
TORCH_MODULE(StochasticDepth);

// Flattens all dimensions from `start` (torch.nn.Flatten with start_dim).
class FlattenImpl : public torch::nn::Cloneable<FlattenImpl> {
 public:
  explicit FlattenImpl(int64_t start = 1) : start_(start) {}
  void reset() override {}
  torch::Tensor forward(const torch::Tensor& x) { return x.flatten(start_); }

 private:
  int64_t start_;
};
TORCH_MODULE(Flatten);

// Global average pooling to 1x1 (torch.nn.AdaptiveAvgPool2d(1)), no parameters.
class GlobalAvgPoolImpl : public torch::nn::Cloneable<GlobalAvgPoolImpl> {
 public:
  void reset() override {}
  torch::Tensor forward(const torch::Tensor& x);
};
TORCH_MODULE(GlobalAvgPool);

// Reorders dimensions (torchvision.ops.Permute), no parameters: ConvNeXt's blocks run their
// LayerNorm and linear layers channels-last.
class PermuteImpl : public torch::nn::Cloneable<PermuteImpl> {
 public:
  explicit PermuteImpl(std::vector<int64_t> dims) : dims_(std::move(dims)) {}
  void reset() override {}
  torch::Tensor forward(const torch::Tensor& x) { return x.permute(dims_); }

 private:
  std::vector<int64_t> dims_;
};
TORCH_MODULE(Permute);

// LayerNorm over the channels of an NCHW tensor (torchvision's LayerNorm2d: weight and bias of
// `channels` entries, as nn.LayerNorm's).
class LayerNorm2dImpl : public torch::nn::Cloneable<LayerNorm2dImpl> {
 public:
  explicit LayerNorm2dImpl(int64_t channels, double eps = 1e-6) : channels_(channels), eps_(eps) { reset(); }
  void reset() override;
  torch::Tensor forward(const torch::Tensor& x);
  void pretty_print(std::ostream& stream) const override;

  torch::Tensor weight, bias;

 private:
  int64_t channels_;
  double eps_;
};
TORCH_MODULE(LayerNorm2d);

// Fills `tensor` from normal(0, std) truncated to [a, b] (torch.nn.init.trunc_normal_, whose
// bounds are absolute values, not multiples of std).
void trunc_normal_(torch::Tensor tensor, double std, double a = -2, double b = 2);

// Convolutions' and linear layers' weights in `module` (itself included) truncated normal(0, std)
// within +-2, as torchvision's GoogLeNet, Inception v3 and ConvNeXt; their biases zero when
// `zero_biases`, else as PyTorch made them.
void init_truncated_normal(torch::nn::Module& module, double std, bool zero_biases);

// How torchvision initialises a family's linear layers (biases are zero in both).
enum class LinearInit {
  Normal,      // normal(0, 0.01): VGG, MobileNetV2/V3, RegNet
  UniformOut,  // uniform(+-1/sqrt(out_features)): EfficientNet
};

// The initialisation torchvision's convolutional families share: convolutions Kaiming-normal
// (fan_out, ReLU gain) with zero bias, batch and group norms 1 and 0, linear layers as `linear`.
void init_like_torchvision(torch::nn::Module& network, LinearInit linear);

}  // namespace dpt::models
