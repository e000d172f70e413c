#pragma once
// The loops of the fused max-pool (max_pool.h), on bf16 images laid out channels_last (each image
// height x width x channels). bf16 values travel as their 16 bits. Each window is scanned row by
// row, left to right; a value replaces the window's maximum when it is greater or NaN, as
// LibTorch's kernels decide, so the maximum and the position its gradient goes to are LibTorch's.

#include <cstdint>

namespace dpt::models::kernel {

struct PoolShape {
  int64_t batch = 0;
  int64_t height = 0, width = 0, channels = 0;  // each input image's
  int64_t out_height = 0, out_width = 0;
  int64_t kernel_h = 0, kernel_w = 0;
  int64_t stride_h = 0, stride_w = 0;
  int64_t pad_h = 0, pad_w = 0;  // at most half the kernel, so no window lies wholly in the padding
};

// The window of output (oh, ow) in input coordinates: its corner (top, left), padding included,
// and the rows [h0, h1) and columns [w0, w1) of it inside the image.
struct PoolWindow {
  int64_t top, left;
  int64_t h0, h1, w0, w1;
  // Where (h, w) lies in the window (see kMaxPoolWindowValues).
  int64_t position(const PoolShape& s, int64_t h, int64_t w) const { return (h - top) * s.kernel_w + (w - left); }
};
inline PoolWindow pool_window(const PoolShape& s, int64_t oh, int64_t ow) {
  const int64_t top = oh * s.stride_h - s.pad_h;
  const int64_t left = ow * s.stride_w - s.pad_w;
  return {top, left, top < 0 ? 0 : top, top + s.kernel_h < s.height ? top + s.kernel_h : s.height,
          left < 0 ? 0 : left, left + s.kernel_w < s.width ? left + s.kernel_w : s.width};
}

// The outputs whose windows hold input row (or column) `i`: [first, last).
struct PoolCover {
  int64_t first, last;
};
inline PoolCover covering_outputs(int64_t i, int64_t pad, int64_t kernel, int64_t stride, int64_t outputs) {
  // Output o covers [o * stride - pad, o * stride - pad + kernel).
  const int64_t low = i + pad - kernel + 1;
  const int64_t first = low <= 0 ? 0 : (low + stride - 1) / stride;
  const int64_t last = (i + pad) / stride + 1;
  return {first, last < outputs ? last : outputs};
}

// Where in its window an output's maximum lies, (h - top) * kernel_w + (w - left) for the window
// whose corner (padding included) is (top, left): one byte, so kernels have at most 256 values.
constexpr int64_t kMaxPoolWindowValues = 256;

// y = each window's maximum, per channel (exact: it is one of the inputs), and where it lies.
void max_pool_forward(const uint16_t* x, const PoolShape& shape, uint16_t* y, uint8_t* positions);

// grad_x = the sum, over the windows whose maximum a value is, of their output gradients: in
// float, in the order of the outputs, rounded to bf16 once. Each input pixel gathers from the
// windows that cover it, so every value of grad_x is written once and none is read back.
void max_pool_backward(const uint16_t* grad_y, const uint8_t* positions, const PoolShape& shape, uint16_t* grad_x);

// One image of each, in loops the compiler vectorizes as it can; max_pool_avx512.h has the same in
// AVX-512, which the two above choose where the CPU has it (the unit tests compare the two).
void max_pool_image_portable(const uint16_t* x, const PoolShape& shape, uint16_t* y, uint8_t* positions);
void max_pool_grad_image_portable(const uint16_t* grad_y, const uint8_t* positions, const PoolShape& shape,
                                  uint16_t* grad_x);

}  // namespace dpt::models::kernel
