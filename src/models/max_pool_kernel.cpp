#include "max_pool_kernel.h"

#include <ATen/Parallel.h>

#include <algorithm>
#include <limits>
#include <vector>

#include "bf16_avx512.h"
#include "bf16_bits.h"
#include "max_pool_avx512.h"

namespace dpt::models::kernel {

namespace {

int64_t pooled_input_size(const PoolShape& s) { return s.height * s.width * s.channels; }
int64_t pooled_size(const PoolShape& s) { return s.out_height * s.out_width * s.channels; }

// LibTorch's rule: a value takes the maximum's place when greater, or NaN.
inline bool takes_maximum(float value, float best) { return value > best || value != value; }

}  // namespace

void max_pool_image_portable(const uint16_t* x, const PoolShape& s, uint16_t* y, uint8_t* positions) {
  std::vector<float> best(static_cast<size_t>(s.channels));
  for (int64_t oh = 0; oh < s.out_height; ++oh) {
    for (int64_t ow = 0; ow < s.out_width; ++ow) {
      const PoolWindow window = pool_window(s, oh, ow);
      const int64_t output = (oh * s.out_width + ow) * s.channels;
      uint8_t* where = positions + output;
      std::fill(best.begin(), best.end(), -std::numeric_limits<float>::infinity());
      // Where no value is greater than -inf, LibTorch names the window's first pixel.
      std::fill(where, where + s.channels, static_cast<uint8_t>(window.position(s, window.h0, window.w0)));
      for (int64_t h = window.h0; h < window.h1; ++h) {
        for (int64_t w = window.w0; w < window.w1; ++w) {
          const uint16_t* pixel = x + (h * s.width + w) * s.channels;
          const auto here = static_cast<uint8_t>(window.position(s, h, w));
          for (int64_t c = 0; c < s.channels; ++c) {
            const float value = bf16_to_float(pixel[c]);
            if (takes_maximum(value, best[c])) {
              best[c] = value;
              where[c] = here;
            }
          }
        }
      }
      for (int64_t c = 0; c < s.channels; ++c) y[output + c] = bf16_of_widened(best[c]);  // exact: an input
    }
  }
}

void max_pool_grad_image_portable(const uint16_t* grad_y, const uint8_t* positions, const PoolShape& s,
                                  uint16_t* grad_x) {
  std::vector<float> sum(static_cast<size_t>(s.channels));
  for (int64_t h = 0; h < s.height; ++h) {
    const PoolCover rows = covering_outputs(h, s.pad_h, s.kernel_h, s.stride_h, s.out_height);
    for (int64_t w = 0; w < s.width; ++w) {
      const PoolCover columns = covering_outputs(w, s.pad_w, s.kernel_w, s.stride_w, s.out_width);
      std::fill(sum.begin(), sum.end(), 0.0f);
      for (int64_t oh = rows.first; oh < rows.last; ++oh) {
        for (int64_t ow = columns.first; ow < columns.last; ++ow) {
          const auto here = static_cast<uint8_t>(pool_window(s, oh, ow).position(s, h, w));
          const int64_t output = (oh * s.out_width + ow) * s.channels;
          for (int64_t c = 0; c < s.channels; ++c) {
            if (positions[output + c] == here) sum[c] += bf16_to_float(grad_y[output + c]);
          }
        }
      }
      uint16_t* out = grad_x + (h * s.width + w) * s.channels;
      for (int64_t c = 0; c < s.channels; ++c) out[c] = float_to_bf16(sum[c]);
    }
  }
}

void max_pool_forward(const uint16_t* x, const PoolShape& shape, uint16_t* y, uint8_t* positions) {
  const auto image = have_avx512() ? max_pool_image_avx512 : max_pool_image_portable;
  at::parallel_for(0, shape.batch, /*grain_size=*/1, [&](int64_t begin, int64_t end) {
    for (int64_t n = begin; n < end; ++n) {
      image(x + n * pooled_input_size(shape), shape, y + n * pooled_size(shape), positions + n * pooled_size(shape));
    }
  });
}

void max_pool_backward(const uint16_t* grad_y, const uint8_t* positions, const PoolShape& shape, uint16_t* grad_x) {
  const auto image = have_avx512() ? max_pool_grad_image_avx512 : max_pool_grad_image_portable;
  at::parallel_for(0, shape.batch, /*grain_size=*/1, [&](int64_t begin, int64_t end) {
    for (int64_t n = begin; n < end; ++n) {
      const int64_t output = n * pooled_size(shape);
      image(grad_y + output, positions + output, shape, grad_x + n * pooled_input_size(shape));
    }
  });
}

}  // namespace dpt::models::kernel
