#include "batch_norm_relu_avx512.h"

#include "bf16_avx512.h"

namespace dpt::models::kernel {

#if defined(DPT_MODELS_X86)

namespace {

DPT_AVX512 inline __m512 load_float(const float* p, __mmask16 lanes) {
  return _mm512_maskz_loadu_ps(lanes, p);
}

// ReLU's backward: the gradient where the output is positive.
DPT_AVX512 inline __m512 relu_grad(const uint16_t* grad, const uint16_t* output, __mmask16 lanes) {
  const __mmask16 positive = _mm512_cmp_ps_mask(load_bf16(output, lanes), _mm512_setzero_ps(), _CMP_GT_OQ);
  return _mm512_maskz_mov_ps(positive, load_bf16(grad, lanes));
}

}  // namespace

// The sums take kBlocks blocks of channels at a time down the rows, their accumulators in registers.
DPT_AVX512 void chunk_moments_avx512(const uint16_t* x, int64_t rows, int64_t channels, float* mean, float* m2) {
  const __m512 inverse = _mm512_set1_ps(1.0f / static_cast<float>(rows));
  for (int64_t c0 = 0; c0 < channels; c0 += kLanes * kBlocks) {
    __mmask16 lanes[kBlocks];
    block_lanes(c0, channels, lanes);
    __m512 sum[kBlocks];
    for (int b = 0; b < kBlocks; ++b) sum[b] = _mm512_setzero_ps();
    for (int64_t r = 0; r < rows; ++r) {
      const uint16_t* row = x + r * channels + c0;
      for (int b = 0; b < kBlocks; ++b) sum[b] = _mm512_add_ps(sum[b], load_bf16(row + b * kLanes, lanes[b]));
    }
    __m512 average[kBlocks], squares[kBlocks];
    for (int b = 0; b < kBlocks; ++b) {
      average[b] = _mm512_mul_ps(sum[b], inverse);
      squares[b] = _mm512_setzero_ps();
    }
    for (int64_t r = 0; r < rows; ++r) {
      const uint16_t* row = x + r * channels + c0;
      for (int b = 0; b < kBlocks; ++b) {
        const __m512 centred = _mm512_sub_ps(load_bf16(row + b * kLanes, lanes[b]), average[b]);
        squares[b] = _mm512_add_ps(squares[b], rounded_product(centred, centred));
      }
    }
    for (int b = 0; b < kBlocks; ++b) {
      _mm512_mask_storeu_ps(mean + c0 + b * kLanes, lanes[b], average[b]);
      _mm512_mask_storeu_ps(m2 + c0 + b * kLanes, lanes[b], squares[b]);
    }
  }
}

// Elementwise passes go down the rows in memory order (the per-channel factors come from L1).
DPT_AVX512 void scale_shift_relu_rows_avx512(const uint16_t* x, const uint16_t* residual, const float* scale,
                                             const float* shift, int64_t rows, int64_t channels, uint16_t* y) {
  for (int64_t r = 0; r < rows; ++r) {
    for (int64_t c = 0; c < channels; c += kLanes) {
      const __mmask16 lanes = lanes_from(c, channels);
      const int64_t at = r * channels + c;
      __m512 value = _mm512_add_ps(rounded_product(load_bf16(x + at, lanes), load_float(scale + c, lanes)),
                                   load_float(shift + c, lanes));
      if (residual != nullptr) value = _mm512_add_ps(value, load_bf16(residual + at, lanes));
      // max(value, 0) that keeps a NaN, as ReLU does.
      value = _mm512_mask_mov_ps(value, _mm512_cmp_ps_mask(value, _mm512_setzero_ps(), _CMP_LT_OQ),
                                 _mm512_setzero_ps());
      store_bf16(y + at, lanes, value);
    }
  }
}

DPT_AVX512 void chunk_grad_sums_avx512(const uint16_t* grad, const uint16_t* y, const uint16_t* x, const float* mean,
                                       int64_t rows, int64_t channels, float* sum_grad, float* sum_grad_centred) {
  for (int64_t c0 = 0; c0 < channels; c0 += kLanes * kBlocks) {
    __mmask16 lanes[kBlocks];
    block_lanes(c0, channels, lanes);
    __m512 m[kBlocks], sum[kBlocks], centred[kBlocks];
    for (int b = 0; b < kBlocks; ++b) {
      m[b] = load_float(mean + c0 + b * kLanes, lanes[b]);
      sum[b] = _mm512_setzero_ps();
      centred[b] = _mm512_setzero_ps();
    }
    for (int64_t r = 0; r < rows; ++r) {
      const int64_t row = r * channels + c0;
      for (int b = 0; b < kBlocks; ++b) {
        const int64_t at = row + b * kLanes;
        const __m512 g = relu_grad(grad + at, y + at, lanes[b]);
        sum[b] = _mm512_add_ps(sum[b], g);
        centred[b] = _mm512_add_ps(centred[b], rounded_product(g, _mm512_sub_ps(load_bf16(x + at, lanes[b]), m[b])));
      }
    }
    for (int b = 0; b < kBlocks; ++b) {
      _mm512_mask_storeu_ps(sum_grad + c0 + b * kLanes, lanes[b], sum[b]);
      _mm512_mask_storeu_ps(sum_grad_centred + c0 + b * kLanes, lanes[b], centred[b]);
    }
  }
}

DPT_AVX512 void input_grad_rows_avx512(const uint16_t* grad, const uint16_t* y, const uint16_t* x,
                                       const InputGradient& terms, int64_t rows, int64_t channels, uint16_t* grad_x,
                                       uint16_t* grad_residual) {
  for (int64_t r = 0; r < rows; ++r) {
    for (int64_t c = 0; c < channels; c += kLanes) {
      const __mmask16 lanes = lanes_from(c, channels);
      const int64_t at = r * channels + c;
      const __m512 g = relu_grad(grad + at, y + at, lanes);
      const __m512 centred = _mm512_sub_ps(load_bf16(x + at, lanes), load_float(terms.mean + c, lanes));
      const __m512 rest =
          _mm512_add_ps(rounded_product(centred, load_float(terms.c + c, lanes)), load_float(terms.b + c, lanes));
      store_bf16(grad_x + at, lanes, _mm512_mul_ps(load_float(terms.a + c, lanes), _mm512_sub_ps(g, rest)));
      if (grad_residual != nullptr) store_bf16(grad_residual + at, lanes, g);
    }
  }
}

#else

void chunk_moments_avx512(const uint16_t*, int64_t, int64_t, float*, float*) {}
void scale_shift_relu_rows_avx512(const uint16_t*, const uint16_t*, const float*, const float*, int64_t, int64_t,
                                  uint16_t*) {}
void chunk_grad_sums_avx512(const uint16_t*, const uint16_t*, const uint16_t*, const float*, int64_t, int64_t, float*,
                            float*) {}
void input_grad_rows_avx512(const uint16_t*, const uint16_t*, const uint16_t*, const InputGradient&, int64_t, int64_t,
                            uint16_t*, uint16_t*) {}

#endif

}  // namespace dpt::models::kernel
