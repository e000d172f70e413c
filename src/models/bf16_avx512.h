#pragma once
// bf16 in AVX-512 registers (F, BW, VL), for the models layer's fused CPU loops
// (batch_norm_relu_avx512.cpp, max_pool_avx512.cpp): 16 channels per instruction, widened to
// float, the last block of a row masked to what is left. Functions that use these carry
// DPT_AVX512 and run only where have_avx512() says so. Private to the models layer.

#include <cstdint>

#if defined(__x86_64__)
#include <immintrin.h>
#define DPT_MODELS_X86 1
#define DPT_AVX512 __attribute__((target("avx512f,avx512bw,avx512vl")))
#endif

namespace dpt::models::kernel {

#if defined(DPT_MODELS_X86)

// Whether this CPU runs AVX-512 F, BW and VL (checked once).
inline bool have_avx512() {
  static const bool avx512 = __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw") &&
                             __builtin_cpu_supports("avx512vl");
  return avx512;
}

constexpr int64_t kLanes = 16;
// A block with all its lanes loads and stores unmasked: on AMD's Zen 5 the masked forms made the
// fused ResNet-50 step 12% slower than LibTorch's separate layers (docs/benchmarks.md).
constexpr __mmask16 kAllLanes = 0xffff;
// The shifts and conversions below use their zero-masked forms with every lane set: GCC 12 warns
// (-Wmaybe-uninitialized) inside the plain forms, whose pass-through operand is left undefined.
// Both compile to the same unmasked instruction.

// a * b, rounded to float before anything is added to it, as the portable loops round it: the
// empty asm makes the product a value of its own, which no compiler can fuse with the add that
// follows. A flag cannot promise it: GCC 14 fused them into FMA under -ffp-contract=off when the
// file was compiled with the build's precompiled header, whose intrinsics keep its own setting.
DPT_AVX512 inline __m512 rounded_product(__m512 a, __m512 b) {
  __m512 product = _mm512_mul_ps(a, b);
  __asm__("" : "+v"(product));
  return product;
}

DPT_AVX512 inline __mmask16 lanes_from(int64_t c, int64_t channels) {
  const int64_t left = channels - c;
  return left >= kLanes ? kAllLanes : static_cast<__mmask16>((1u << left) - 1);
}

DPT_AVX512 inline __m512 load_bf16(const uint16_t* p, __mmask16 lanes) {
  const __m256i half = lanes == kAllLanes ? _mm256_loadu_si256(reinterpret_cast<const __m256i*>(p))
                                           : _mm256_maskz_loadu_epi16(lanes, p);
  return _mm512_castsi512_ps(_mm512_maskz_slli_epi32(kAllLanes, _mm512_maskz_cvtepu16_epi32(kAllLanes, half), 16));
}

// Loops that keep several blocks of channels in registers take 4 at a time; a block past the last
// channel has no lanes (its loads read nothing, its stores write nothing).
constexpr int kBlocks = 4;

DPT_AVX512 inline void block_lanes(int64_t c0, int64_t channels, __mmask16* lanes) {
  for (int b = 0; b < kBlocks; ++b) {
    const int64_t c = c0 + b * kLanes;
    lanes[b] = c < channels ? lanes_from(c, channels) : __mmask16(0);
  }
}

// Narrowing in a register, then storing: the compiler would otherwise fold the two into VPMOVDW
// to memory, which AMD's Zen 4 runs microcoded, many times slower.
DPT_AVX512 inline void store_bits(uint16_t* p, __mmask16 lanes, __m512i bits) {
  __m256i packed = _mm512_maskz_cvtepi32_epi16(kAllLanes, bits);
  asm("" : "+x"(packed));
  if (lanes == kAllLanes) {
    _mm256_storeu_si256(reinterpret_cast<__m256i*>(p), packed);
  } else {
    _mm256_mask_storeu_epi16(p, lanes, packed);
  }
}

// Round to nearest, ties to even, NaN to a quiet NaN: c10::BFloat16's rounding, 16 at a time.
DPT_AVX512 inline void store_bf16(uint16_t* p, __mmask16 lanes, __m512 value) {
  const __m512i bits = _mm512_castps_si512(value);
  const __m512i odd = _mm512_and_si512(_mm512_maskz_srli_epi32(kAllLanes, bits, 16), _mm512_set1_epi32(1));
  const __m512i bias = _mm512_add_epi32(odd, _mm512_set1_epi32(0x7fff));
  __m512i rounded = _mm512_maskz_srli_epi32(kAllLanes, _mm512_add_epi32(bits, bias), 16);
  rounded = _mm512_mask_blend_epi32(_mm512_cmp_ps_mask(value, value, _CMP_UNORD_Q), rounded, _mm512_set1_epi32(0x7fc0));
  store_bits(p, lanes, rounded);
}

#else

inline bool have_avx512() { return false; }

#endif

}  // namespace dpt::models::kernel
