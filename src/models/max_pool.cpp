#include "dptrain/models/max_pool.h"

#include <torch/autograd.h>

#include <optional>
#include <vector>

#include "bf16_bits.h"
#include "max_pool_kernel.h"

namespace dpt::models {

namespace {

using torch::autograd::AutogradContext;
using torch::autograd::variable_list;

// The shape of the fused case, or nullopt where torch::max_pool2d should run (and give its own
// errors for sizes it refuses).
std::optional<kernel::PoolShape> fusable_shape(const torch::Tensor& x, torch::IntArrayRef kernel_size,
                                               torch::IntArrayRef stride, torch::IntArrayRef padding) {
  if (!kernel::is_bf16_channels_last_cpu(x) || x.numel() == 0) return std::nullopt;
  if (kernel_size.size() != 2 || stride.size() != 2 || padding.size() != 2) return std::nullopt;
  kernel::PoolShape s;
  s.batch = x.size(0);
  s.channels = x.size(1);
  s.height = x.size(2);
  s.width = x.size(3);
  s.kernel_h = kernel_size[0];
  s.kernel_w = kernel_size[1];
  s.stride_h = stride[0];
  s.stride_w = stride[1];
  s.pad_h = padding[0];
  s.pad_w = padding[1];
  const bool valid = s.kernel_h > 0 && s.kernel_w > 0 && s.stride_h > 0 && s.stride_w > 0 && s.pad_h >= 0 &&
                     s.pad_w >= 0 && 2 * s.pad_h <= s.kernel_h && 2 * s.pad_w <= s.kernel_w &&
                     s.kernel_h * s.kernel_w <= kernel::kMaxPoolWindowValues;
  if (!valid) return std::nullopt;
  s.out_height = (s.height + 2 * s.pad_h - s.kernel_h) / s.stride_h + 1;
  s.out_width = (s.width + 2 * s.pad_w - s.kernel_w) / s.stride_w + 1;
  if (s.out_height < 1 || s.out_width < 1) return std::nullopt;
  return s;
}

// The shape's fields in one order, to keep it in the autograd context as a list.
std::vector<int64_t*> fields_of(kernel::PoolShape& s) {
  return {&s.batch,    &s.height,   &s.width,    &s.channels, &s.out_height, &s.out_width,
          &s.kernel_h, &s.kernel_w, &s.stride_h, &s.stride_w, &s.pad_h,      &s.pad_w};
}

std::vector<int64_t> to_list(kernel::PoolShape s) {
  std::vector<int64_t> list;
  for (const int64_t* field : fields_of(s)) list.push_back(*field);
  return list;
}

kernel::PoolShape from_list(const std::vector<int64_t>& list) {
  kernel::PoolShape s;
  const auto fields = fields_of(s);
  for (size_t i = 0; i < fields.size(); ++i) *fields[i] = list.at(i);
  return s;
}

struct MaxPoolBf16 : public torch::autograd::Function<MaxPoolBf16> {
  static torch::Tensor forward(AutogradContext* ctx, const torch::Tensor& x, const std::vector<int64_t>& shape) {
    const kernel::PoolShape s = from_list(shape);
    auto y = torch::empty({s.batch, s.channels, s.out_height, s.out_width},
                          x.options().memory_format(torch::MemoryFormat::ChannelsLast));
    // Where each maximum lies in its window, a byte per output value (LibTorch keeps an int64).
    auto positions = torch::empty({s.batch, s.out_height, s.out_width, s.channels}, x.options().dtype(torch::kByte));
    kernel::max_pool_forward(kernel::bf16_bits(x), s, kernel::mutable_bf16_bits(y), positions.data_ptr<uint8_t>());
    ctx->save_for_backward({positions});
    ctx->saved_data["shape"] = shape;
    return y;
  }

  static variable_list backward(AutogradContext* ctx, variable_list grad_outputs) {
    const auto positions = ctx->get_saved_variables()[0];
    const kernel::PoolShape s = from_list(ctx->saved_data["shape"].toIntVector());
    const auto grad = grad_outputs[0].to(torch::kBFloat16).contiguous(torch::MemoryFormat::ChannelsLast);
    auto grad_x = torch::empty({s.batch, s.channels, s.height, s.width},
                               grad.options().memory_format(torch::MemoryFormat::ChannelsLast));
    kernel::max_pool_backward(kernel::bf16_bits(grad), positions.data_ptr<uint8_t>(), s,
                              kernel::mutable_bf16_bits(grad_x));
    return {grad_x, torch::Tensor()};
  }
};

}  // namespace

torch::Tensor max_pool(const torch::Tensor& x, torch::IntArrayRef kernel_size, torch::IntArrayRef stride,
                         torch::IntArrayRef padding) {
  const auto shape = fusable_shape(x, kernel_size, stride, padding);
  if (!shape) return torch::max_pool2d(x, kernel_size, stride, padding);
  return MaxPoolBf16::apply(x, to_list(*shape));
}

}  // namespace dpt::models
