#include "dptrain/models/batch_norm_relu.h"

#include <torch/autograd.h>
#include <torch/nn/modules/batchnorm.h>

#include <cmath>
#include <typeinfo>
#include <vector>

#include "batch_norm_relu_kernel.h"
#include "bf16_bits.h"

namespace dpt::models {

namespace {

using torch::autograd::AutogradContext;
using torch::autograd::variable_list;
using kernel::bf16_bits;
using kernel::mutable_bf16_bits;

// The batch norm the fused path stands for: BatchNorm2d itself (not a subclass), training with
// batch statistics, affine float32 parameters and running statistics on the CPU.
torch::nn::BatchNorm2dImpl* fusable_batch_norm(torch::nn::AnyModule& norm) {
  auto* module = norm.ptr().get();
  if (module == nullptr || typeid(*module) != typeid(torch::nn::BatchNorm2dImpl)) return nullptr;
  auto* bn = dynamic_cast<torch::nn::BatchNorm2dImpl*>(module);
  const bool ready = bn->is_training() && bn->weight.defined() && bn->bias.defined() &&
                     bn->running_mean.defined() && bn->running_var.defined() &&
                     bn->weight.scalar_type() == torch::kFloat && bn->weight.device().is_cpu() &&
                     bn->running_mean.scalar_type() == torch::kFloat && bn->running_var.scalar_type() == torch::kFloat;
  return ready ? bn : nullptr;
}

bool fusable(torch::nn::BatchNorm2dImpl* bn, const torch::Tensor& x, const torch::Tensor& residual) {
  if (bn == nullptr || !kernel::is_bf16_channels_last_cpu(x) || x.size(1) != bn->weight.numel()) return false;
  if (x.numel() / x.size(1) < 2) return false;  // BatchNorm2d's own error: one value per channel
  return !residual.defined() || (kernel::is_bf16_channels_last_cpu(residual) && residual.sizes() == x.sizes());
}

// BatchNormImplBase::forward's bookkeeping: the batch counted, and the factor of the running
// averages (the momentum, or 1/batches for a cumulative average).
double count_batch(torch::nn::BatchNorm2dImpl& bn) {
  torch::NoGradGuard no_grad;
  double factor = bn.options.momentum().value_or(0.0);
  if (bn.num_batches_tracked.defined()) {
    bn.num_batches_tracked += 1;
    if (!bn.options.momentum()) factor = 1.0 / bn.num_batches_tracked.item<double>();
  }
  return factor;
}

// The forward and backward of both autograd functions below; `residual_input` may be undefined.
// (Two functions, because LibTorch 1.13's autograd takes no undefined tensor as an input.)
struct FusedNormReLU {
  static torch::Tensor forward(AutogradContext* ctx, const torch::Tensor& input, const torch::Tensor& residual_input,
                               const torch::Tensor& weight, const torch::Tensor& bias, torch::Tensor running_mean,
                               torch::Tensor running_var, double momentum, double eps) {
    const auto x = input.contiguous(torch::MemoryFormat::ChannelsLast);
    const int64_t channels = x.size(1);
    const int64_t rows = x.numel() / channels;
    std::vector<double> mean(static_cast<size_t>(channels));
    std::vector<double> variance(mean.size());
    kernel::channel_moments(bf16_bits(x), rows, channels, mean.data(), variance.data());

    const auto options = torch::TensorOptions().dtype(torch::kFloat);
    auto mean_f = torch::empty({channels}, options);
    auto invstd = torch::empty({channels}, options);
    auto scale = torch::empty({channels}, options);
    auto shift = torch::empty({channels}, options);
    auto unbiased = torch::empty({channels}, options);
    auto mean_rounding = torch::empty({channels}, options.dtype(torch::kDouble));
    const auto w = weight.contiguous();
    const auto b = bias.contiguous();
    const float* weight_of = w.data_ptr<float>();
    const float* bias_of = b.data_ptr<float>();
    for (int64_t c = 0; c < channels; ++c) {
      const float inv = static_cast<float>(1.0 / std::sqrt(variance[c] + eps));
      const float mean_c = static_cast<float>(mean[c]);
      const float scale_c = inv * weight_of[c];
      mean_f.data_ptr<float>()[c] = mean_c;
      mean_rounding.data_ptr<double>()[c] = mean_c - mean[c];
      invstd.data_ptr<float>()[c] = inv;
      scale.data_ptr<float>()[c] = scale_c;
      shift.data_ptr<float>()[c] = bias_of[c] - mean_c * scale_c;
      unbiased.data_ptr<float>()[c] = static_cast<float>(variance[c] * rows / (rows - 1));
    }
    running_mean.mul_(1 - momentum).add_(mean_f, momentum);
    running_var.mul_(1 - momentum).add_(unbiased, momentum);

    auto y = torch::empty_like(x, torch::MemoryFormat::ChannelsLast);
    const auto residual =
        residual_input.defined() ? residual_input.contiguous(torch::MemoryFormat::ChannelsLast) : torch::Tensor();
    kernel::scale_shift_relu(bf16_bits(x), residual.defined() ? bf16_bits(residual) : nullptr, scale.data_ptr<float>(),
                             shift.data_ptr<float>(), rows, channels, mutable_bf16_bits(y));
    ctx->save_for_backward({x, w, mean_f, invstd, y, mean_rounding});
    ctx->saved_data["residual"] = residual.defined();
    return y;
  }

  // The gradients of x, the residual (undefined without one), weight and bias.
  static variable_list backward(AutogradContext* ctx, const variable_list& grad_outputs) {
    const auto saved = ctx->get_saved_variables();
    const auto& x = saved[0];
    const auto& weight = saved[1];
    const auto& mean = saved[2];
    const auto& invstd = saved[3];
    const auto& y = saved[4];
    const auto& mean_rounding = saved[5];
    const auto grad = grad_outputs[0].to(torch::kBFloat16).contiguous(torch::MemoryFormat::ChannelsLast);
    const int64_t channels = x.size(1);
    const int64_t rows = x.numel() / channels;

    std::vector<double> sum_grad(static_cast<size_t>(channels));
    std::vector<double> sum_centred(sum_grad.size());
    kernel::relu_grad_sums(bf16_bits(grad), bf16_bits(y), bf16_bits(x), mean.data_ptr<float>(), rows, channels,
                           sum_grad.data(), sum_centred.data());

    const auto options = torch::TensorOptions().dtype(torch::kFloat);
    auto grad_weight = torch::empty({channels}, options);
    auto grad_bias = torch::empty({channels}, options);
    std::vector<float> a(sum_grad.size()), b(sum_grad.size()), c(sum_grad.size());
    for (int64_t i = 0; i < channels; ++i) {
      // The loops centre x on the float mean; this puts the exact one back: sum(g * (x - mean))
      // = sum(g * (x - float_mean)) + (float_mean - mean) * sum(g).
      sum_centred[i] += mean_rounding.data_ptr<double>()[i] * sum_grad[i];
      const double inv = invstd.data_ptr<float>()[i];
      grad_weight.data_ptr<float>()[i] = static_cast<float>(sum_centred[i] * inv);
      grad_bias.data_ptr<float>()[i] = static_cast<float>(sum_grad[i]);
      a[i] = static_cast<float>(inv * weight.data_ptr<float>()[i]);
      b[i] = static_cast<float>(sum_grad[i] / rows);
      c[i] = static_cast<float>(sum_centred[i] * inv * inv / rows);
    }
    auto grad_x = torch::empty_like(x, torch::MemoryFormat::ChannelsLast);
    torch::Tensor grad_residual;
    if (ctx->saved_data["residual"].toBool()) grad_residual = torch::empty_like(x, torch::MemoryFormat::ChannelsLast);
    kernel::relu_norm_input_grad(bf16_bits(grad), bf16_bits(y), bf16_bits(x),
                                 {mean.data_ptr<float>(), a.data(), b.data(), c.data()}, rows, channels,
                                 mutable_bf16_bits(grad_x),
                                 grad_residual.defined() ? mutable_bf16_bits(grad_residual) : nullptr);
    return {grad_x, grad_residual, grad_weight, grad_bias};
  }
};

struct BatchNormReLU : public torch::autograd::Function<BatchNormReLU> {
  static torch::Tensor forward(AutogradContext* ctx, const torch::Tensor& x, const torch::Tensor& weight,
                               const torch::Tensor& bias, const torch::Tensor& running_mean,
                               const torch::Tensor& running_var, double momentum, double eps) {
    return FusedNormReLU::forward(ctx, x, torch::Tensor(), weight, bias, running_mean, running_var, momentum, eps);
  }
  static variable_list backward(AutogradContext* ctx, variable_list grad_outputs) {
    auto grads = FusedNormReLU::backward(ctx, grad_outputs);
    return {grads[0], grads[2], grads[3], {}, {}, {}, {}};
  }
};

struct BatchNormAddReLU : public torch::autograd::Function<BatchNormAddReLU> {
  static torch::Tensor forward(AutogradContext* ctx, const torch::Tensor& x, const torch::Tensor& residual,
                               const torch::Tensor& weight, const torch::Tensor& bias,
                               const torch::Tensor& running_mean, const torch::Tensor& running_var, double momentum,
                               double eps) {
    return FusedNormReLU::forward(ctx, x, residual, weight, bias, running_mean, running_var, momentum, eps);
  }
  static variable_list backward(AutogradContext* ctx, variable_list grad_outputs) {
    auto grads = FusedNormReLU::backward(ctx, grad_outputs);
    grads.resize(8);
    return grads;
  }
};

torch::Tensor fused(torch::nn::BatchNorm2dImpl& bn, const torch::Tensor& x, const torch::Tensor& residual) {
  const double momentum = count_batch(bn);
  if (!residual.defined()) {
    return BatchNormReLU::apply(x, bn.weight, bn.bias, bn.running_mean, bn.running_var, momentum, bn.options.eps());
  }
  return BatchNormAddReLU::apply(x, residual, bn.weight, bn.bias, bn.running_mean, bn.running_var, momentum,
                                 bn.options.eps());
}

}  // namespace

torch::Tensor norm_relu(torch::nn::AnyModule& norm, const torch::Tensor& x) {
  auto* bn = fusable_batch_norm(norm);
  if (!fusable(bn, x, torch::Tensor())) return norm.forward(x).relu_();
  return fused(*bn, x, torch::Tensor());
}

torch::Tensor norm_add_relu(torch::nn::AnyModule& norm, const torch::Tensor& x, const torch::Tensor& residual) {
  auto* bn = fusable_batch_norm(norm);
  if (!fusable(bn, x, residual)) {
    auto out = norm.forward(x);
    // In place where the sum keeps the norm's type (torchvision's `out += identity`); a norm
    // whose output is narrower than the residual (float16 beside float32) takes the wider sum.
    out = out.scalar_type() == at::result_type(out, residual) ? out.add_(residual) : out + residual;
    return out.relu_();
  }
  return fused(*bn, x, residual);
}

}  // namespace dpt::models
