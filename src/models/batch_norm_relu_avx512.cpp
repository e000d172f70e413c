#include "batch_norm_relu_avx512.h"

#if defined(__x86_64__)
#include <immintrin.h>
#define DPT_BN_RELU_X86 1
#endif

namespace dpt::models::kernel {

#if defined(DPT_BN_RELU_X86)

#define DPT_AVX512 __attribute__((target("avx512f,avx512bw,avx512vl")))

bool have_avx512() {
  static const bool avx512 = __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw") &&
                             __builtin_cpu_supports("avx512vl");
  return avx512;
}

namespace {

// 16 channels at a time; the last block of a row masked to what is left.
constexpr int64_t kLanes = 16;

DPT_AVX512 inline __mmask16 lanes_from(int64_t c, int64_t channels) {
  const int64_t left = channels - c;
  return left >= kLanes ? __mmask16(0xffff) : static_cast<__mmask16>((1u << left) - 1);
}

DPT_AVX512 inline __m512 load_bf16(const uint16_t* p, __mmask16 lanes) {
  const __m256i half = _mm256_maskz_loadu_epi16(lanes, p);
  return _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_cvtepu16_epi32(half), 16));
}

DPT_AVX512 inline __m512 load_float(const float* p, __mmask16 lanes) {
  return _mm512_maskz_loadu_ps(lanes, p);
}

// Round to nearest, ties to even, NaN to a quiet NaN: c10::BFloat16's rounding, 16 at a time.
DPT_AVX512 inline void store_bf16(uint16_t* p, __mmask16 lanes, __m512 value) {
  const __m512i bits = _mm512_castps_si512(value);
  const __m512i odd = _mm512_and_si512(_mm512_srli_epi32(bits, 16), _mm512_set1_epi32(1));
  __m512i rounded = _mm512_srli_epi32(_mm512_add_epi32(bits, _mm512_add_epi32(odd, _mm512_set1_epi32(0x7fff))), 16);
  rounded = _mm512_mask_blend_epi32(_mm512_cmp_ps_mask(value, value, _CMP_UNORD_Q), rounded, _mm512_set1_epi32(0x7fc0));
  __m256i packed = _mm512_cvtepi32_epi16(rounded);
  // Narrowing in a register, then storing: the compiler would otherwise fold the two into
  // VPMOVDW to memory, which AMD's Zen 4 runs microcoded, many times slower.
  asm("" : "+x"(packed));
  _mm256_mask_storeu_epi16(p, lanes, packed);
}

// ReLU's backward: the gradient where the output is positive.
DPT_AVX512 inline __m512 relu_grad(const uint16_t* grad, const uint16_t* output, __mmask16 lanes) {
  const __mmask16 positive = _mm512_cmp_ps_mask(load_bf16(output, lanes), _mm512_setzero_ps(), _CMP_GT_OQ);
  return _mm512_maskz_mov_ps(positive, load_bf16(grad, lanes));
}

}  // namespace

// The sums take 4 blocks of 16 channels at a time down the rows, their accumulators in registers
// (a block past the last channel has no lanes: its loads read nothing, its stores write nothing).
constexpr int kBlocks = 4;

DPT_AVX512 inline void block_lanes(int64_t c0, int64_t channels, __mmask16* lanes) {
  for (int b = 0; b < kBlocks; ++b) {
    const int64_t c = c0 + b * kLanes;
    lanes[b] = c < channels ? lanes_from(c, channels) : __mmask16(0);
  }
}

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
        squares[b] = _mm512_fmadd_ps(centred, centred, squares[b]);
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
      __m512 value = _mm512_fmadd_ps(load_bf16(x + at, lanes), load_float(scale + c, lanes), load_float(shift + c, lanes));
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
        centred[b] = _mm512_fmadd_ps(g, _mm512_sub_ps(load_bf16(x + at, lanes[b]), m[b]), centred[b]);
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
      const __m512 rest = _mm512_fmadd_ps(centred, load_float(terms.c + c, lanes), load_float(terms.b + c, lanes));
      store_bf16(grad_x + at, lanes, _mm512_mul_ps(load_float(terms.a + c, lanes), _mm512_sub_ps(g, rest)));
      if (grad_residual != nullptr) store_bf16(grad_residual + at, lanes, g);
    }
  }
}

#else

bool have_avx512() { return false; }
void chunk_moments_avx512(const uint16_t*, int64_t, int64_t, float*, float*) {}
void scale_shift_relu_rows_avx512(const uint16_t*, const uint16_t*, const float*, const float*, int64_t, int64_t,
                                  uint16_t*) {}
void chunk_grad_sums_avx512(const uint16_t*, const uint16_t*, const uint16_t*, const float*, int64_t, int64_t, float*,
                            float*) {}
void input_grad_rows_avx512(const uint16_t*, const uint16_t*, const uint16_t*, const InputGradient&, int64_t, int64_t,
                            uint16_t*, uint16_t*) {}

#endif

}  // namespace dpt::models::kernel
