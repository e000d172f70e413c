#include "batch_norm_relu_kernel.h"

#include "batch_norm_relu_avx512.h"
#include "bf16_bits.h"

#include <ATen/Parallel.h>

#include <algorithm>
#include <vector>

// The portable loops below run along the channels of one row, which lie next to each other: the
// compiler vectorizes them, for AVX2 where the CPU has it (picked when the library loads). A CPU
// with AVX-512 runs batch_norm_relu_avx512.cpp's instead.
#define DPT_CHANNEL_LOOPS __attribute__((target_clones("avx2", "default")))

namespace dpt::models::kernel {

namespace {

// Rows per chunk: about 16K values (32 KB of bf16), so a chunk read twice is read from cache.
int64_t chunk_rows(int64_t channels) {
  return std::max<int64_t>(1, 16384 / channels);
}

int64_t chunk_count(int64_t rows, int64_t channels) {
  const int64_t per_chunk = chunk_rows(channels);
  return (rows + per_chunk - 1) / per_chunk;
}

// Runs `chunk(first_row, row_count, index)` for every chunk of rows, in parallel.
template <typename Chunk>
void for_each_chunk(int64_t rows, int64_t channels, const Chunk& chunk) {
  const int64_t per_chunk = chunk_rows(channels);
  at::parallel_for(0, chunk_count(rows, channels), /*grain_size=*/4, [&](int64_t begin, int64_t end) {
    for (int64_t i = begin; i < end; ++i) {
      const int64_t first = i * per_chunk;
      chunk(first, std::min(per_chunk, rows - first), i);
    }
  });
}

}  // namespace

DPT_CHANNEL_LOOPS void chunk_moments_portable(const uint16_t* x, int64_t rows, int64_t channels, float* mean,
                                             float* m2) {
  std::fill(mean, mean + channels, 0.0f);
  std::fill(m2, m2 + channels, 0.0f);
  for (int64_t r = 0; r < rows; ++r) {
    const uint16_t* row = x + r * channels;
    for (int64_t c = 0; c < channels; ++c) mean[c] += bf16_to_float(row[c]);
  }
  const float inverse = 1.0f / static_cast<float>(rows);
  for (int64_t c = 0; c < channels; ++c) mean[c] *= inverse;
  for (int64_t r = 0; r < rows; ++r) {
    const uint16_t* row = x + r * channels;
    for (int64_t c = 0; c < channels; ++c) {
      const float centred = bf16_to_float(row[c]) - mean[c];
      m2[c] += centred * centred;
    }
  }
}

void channel_moments(const uint16_t* x, int64_t rows, int64_t channels, double* mean, double* variance) {
  const int64_t chunks = chunk_count(rows, channels);
  std::vector<float> chunk_mean(static_cast<size_t>(chunks * channels));
  std::vector<float> chunk_m2(chunk_mean.size());
  const auto moments = have_avx512() ? chunk_moments_avx512 : chunk_moments_portable;
  for_each_chunk(rows, channels, [&](int64_t first, int64_t count, int64_t i) {
    moments(x + first * channels, count, channels, &chunk_mean[i * channels], &chunk_m2[i * channels]);
  });
  // Chan et al.: merging (n_a, mean_a, M2_a) with (n_b, mean_b, M2_b), chunk after chunk.
  std::vector<double> m2(static_cast<size_t>(channels), 0.0);
  std::fill(mean, mean + channels, 0.0);
  const int64_t per_chunk = chunk_rows(channels);
  double merged = 0;
  for (int64_t i = 0; i < chunks; ++i) {
    const double count = static_cast<double>(std::min(per_chunk, rows - i * per_chunk));
    const double total = merged + count;
    for (int64_t c = 0; c < channels; ++c) {
      const double delta = chunk_mean[i * channels + c] - mean[c];
      mean[c] += delta * count / total;
      m2[c] += chunk_m2[i * channels + c] + delta * delta * merged * count / total;
    }
    merged = total;
  }
  for (int64_t c = 0; c < channels; ++c) variance[c] = m2[c] / static_cast<double>(rows);
}

DPT_CHANNEL_LOOPS void scale_shift_relu_rows_portable(const uint16_t* x, const uint16_t* residual, const float* scale,
                                             const float* shift, int64_t rows, int64_t channels, uint16_t* y) {
  for (int64_t r = 0; r < rows; ++r) {
    const uint16_t* in = x + r * channels;
    uint16_t* out = y + r * channels;
    if (residual != nullptr) {
      const uint16_t* add = residual + r * channels;
      for (int64_t c = 0; c < channels; ++c) {
        out[c] = float_to_bf16(std::max(bf16_to_float(in[c]) * scale[c] + shift[c] + bf16_to_float(add[c]), 0.0f));
      }
    } else {
      for (int64_t c = 0; c < channels; ++c) {
        out[c] = float_to_bf16(std::max(bf16_to_float(in[c]) * scale[c] + shift[c], 0.0f));
      }
    }
  }
}

void scale_shift_relu(const uint16_t* x, const uint16_t* residual, const float* scale, const float* shift,
                      int64_t rows, int64_t channels, uint16_t* y) {
  const auto loop = have_avx512() ? scale_shift_relu_rows_avx512 : scale_shift_relu_rows_portable;
  for_each_chunk(rows, channels, [&](int64_t first, int64_t count, int64_t) {
    const int64_t offset = first * channels;
    loop(x + offset, residual == nullptr ? nullptr : residual + offset, scale, shift, count, channels, y + offset);
  });
}

// ReLU's backward: the gradient where the output is positive (NaN and zero outputs pass none).
inline float relu_grad(uint16_t grad, uint16_t output) {
  return bf16_to_float(output) > 0.0f ? bf16_to_float(grad) : 0.0f;
}

DPT_CHANNEL_LOOPS void chunk_grad_sums_portable(const uint16_t* grad, const uint16_t* y, const uint16_t* x,
                                               const float* mean, int64_t rows, int64_t channels, float* sum_grad,
                                               float* sum_grad_centred) {
  std::fill(sum_grad, sum_grad + channels, 0.0f);
  std::fill(sum_grad_centred, sum_grad_centred + channels, 0.0f);
  for (int64_t r = 0; r < rows; ++r) {
    const int64_t offset = r * channels;
    for (int64_t c = 0; c < channels; ++c) {
      const float g = relu_grad(grad[offset + c], y[offset + c]);
      sum_grad[c] += g;
      sum_grad_centred[c] += g * (bf16_to_float(x[offset + c]) - mean[c]);
    }
  }
}

void relu_grad_sums(const uint16_t* grad, const uint16_t* y, const uint16_t* x, const float* mean, int64_t rows,
                    int64_t channels, double* sum_grad, double* sum_grad_centred) {
  const int64_t chunks = chunk_count(rows, channels);
  std::vector<float> partial_grad(static_cast<size_t>(chunks * channels));
  std::vector<float> partial_centred(partial_grad.size());
  const auto sums = have_avx512() ? chunk_grad_sums_avx512 : chunk_grad_sums_portable;
  for_each_chunk(rows, channels, [&](int64_t first, int64_t count, int64_t i) {
    const int64_t offset = first * channels;
    sums(grad + offset, y + offset, x + offset, mean, count, channels, &partial_grad[i * channels],
         &partial_centred[i * channels]);
  });
  std::fill(sum_grad, sum_grad + channels, 0.0);
  std::fill(sum_grad_centred, sum_grad_centred + channels, 0.0);
  for (int64_t i = 0; i < chunks; ++i) {
    for (int64_t c = 0; c < channels; ++c) {
      sum_grad[c] += partial_grad[i * channels + c];
      sum_grad_centred[c] += partial_centred[i * channels + c];
    }
  }
}

DPT_CHANNEL_LOOPS void input_grad_rows_portable(const uint16_t* grad, const uint16_t* y, const uint16_t* x,
                                                 const InputGradient& terms, int64_t rows, int64_t channels,
                                                 uint16_t* grad_x, uint16_t* grad_residual) {
  const float* mean = terms.mean;
  const float* a = terms.a;
  const float* b = terms.b;
  const float* c_term = terms.c;
  for (int64_t r = 0; r < rows; ++r) {
    const int64_t offset = r * channels;
    for (int64_t c = 0; c < channels; ++c) {
      const float g = relu_grad(grad[offset + c], y[offset + c]);
      grad_x[offset + c] = float_to_bf16(a[c] * (g - b[c] - (bf16_to_float(x[offset + c]) - mean[c]) * c_term[c]));
    }
    if (grad_residual != nullptr) {
      for (int64_t c = 0; c < channels; ++c) {
        grad_residual[offset + c] = float_to_bf16(relu_grad(grad[offset + c], y[offset + c]));
      }
    }
  }
}

void relu_norm_input_grad(const uint16_t* grad, const uint16_t* y, const uint16_t* x, const InputGradient& terms,
                          int64_t rows, int64_t channels, uint16_t* grad_x, uint16_t* grad_residual) {
  const auto loop = have_avx512() ? input_grad_rows_avx512 : input_grad_rows_portable;
  for_each_chunk(rows, channels, [&](int64_t first, int64_t count, int64_t) {
    const int64_t offset = first * channels;
    loop(grad + offset, y + offset, x + offset, terms, count, channels, grad_x + offset,
         grad_residual == nullptr ? nullptr : grad_residual + offset);
  });
}

}  // namespace dpt::models::kernel
