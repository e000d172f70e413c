#include "max_pool_avx512.h"

#include <limits>

#include "bf16_avx512.h"

namespace dpt::models::kernel {

#if defined(DPT_MODELS_X86)

namespace {

DPT_AVX512 inline __m128i load_positions(const uint8_t* p, __mmask16 lanes) { return _mm_maskz_loadu_epi8(lanes, p); }

// Narrowed in a register, then stored (VPMOVDB to memory is microcoded on Zen 4, as store_bits says).
DPT_AVX512 inline void store_positions(uint8_t* p, __mmask16 lanes, __m512i positions) {
  __m128i packed = _mm512_maskz_cvtepi32_epi8(kAllLanes, positions);
  asm("" : "+x"(packed));
  _mm_mask_storeu_epi8(p, lanes, packed);
}

}  // namespace

DPT_AVX512 void max_pool_image_avx512(const uint16_t* x, const PoolShape& s, uint16_t* y, uint8_t* positions) {
  for (int64_t c0 = 0; c0 < s.channels; c0 += kLanes * kBlocks) {
    __mmask16 lanes[kBlocks];
    block_lanes(c0, s.channels, lanes);
    for (int64_t oh = 0; oh < s.out_height; ++oh) {
      for (int64_t ow = 0; ow < s.out_width; ++ow) {
        const PoolWindow window = pool_window(s, oh, ow);
        __m512 best[kBlocks];
        __m512i where[kBlocks];
        for (int b = 0; b < kBlocks; ++b) {
          best[b] = _mm512_set1_ps(-std::numeric_limits<float>::infinity());
          where[b] = _mm512_set1_epi32(static_cast<int>(window.position(s, window.h0, window.w0)));
        }
        for (int64_t h = window.h0; h < window.h1; ++h) {
          for (int64_t w = window.w0; w < window.w1; ++w) {
            const uint16_t* values = x + (h * s.width + w) * s.channels + c0;
            const int here = static_cast<int>(window.position(s, h, w));
            for (int b = 0; b < kBlocks; ++b) {
              const __m512 value = load_bf16(values + b * kLanes, lanes[b]);
              // The portable loops' rule: greater, or NaN.
              const __mmask16 takes = _mm512_cmp_ps_mask(value, best[b], _CMP_GT_OQ) |
                                      _mm512_cmp_ps_mask(value, value, _CMP_UNORD_Q);
              best[b] = _mm512_mask_mov_ps(best[b], takes, value);
              where[b] = _mm512_mask_set1_epi32(where[b], takes, here);
            }
          }
        }
        const int64_t output = (oh * s.out_width + ow) * s.channels + c0;
        for (int b = 0; b < kBlocks; ++b) {
          // The maximum is one of the bf16 inputs: its upper half, as bf16_of_widened.
          const __m512i bits = _mm512_maskz_srli_epi32(kAllLanes, _mm512_castps_si512(best[b]), 16);
          store_bits(y + output + b * kLanes, lanes[b], bits);
          store_positions(positions + output + b * kLanes, lanes[b], where[b]);
        }
      }
    }
  }
}

DPT_AVX512 void max_pool_grad_image_avx512(const uint16_t* grad_y, const uint8_t* positions, const PoolShape& s,
                                           uint16_t* grad_x) {
  for (int64_t c0 = 0; c0 < s.channels; c0 += kLanes * kBlocks) {
    __mmask16 lanes[kBlocks];
    block_lanes(c0, s.channels, lanes);
    for (int64_t h = 0; h < s.height; ++h) {
      const PoolCover rows = covering_outputs(h, s.pad_h, s.kernel_h, s.stride_h, s.out_height);
      for (int64_t w = 0; w < s.width; ++w) {
        const PoolCover columns = covering_outputs(w, s.pad_w, s.kernel_w, s.stride_w, s.out_width);
        __m512 sum[kBlocks];
        for (int b = 0; b < kBlocks; ++b) sum[b] = _mm512_setzero_ps();
        for (int64_t oh = rows.first; oh < rows.last; ++oh) {
          for (int64_t ow = columns.first; ow < columns.last; ++ow) {
            const __m128i here = _mm_set1_epi8(static_cast<char>(pool_window(s, oh, ow).position(s, h, w)));
            const int64_t output = (oh * s.out_width + ow) * s.channels + c0;
            for (int b = 0; b < kBlocks; ++b) {
              const int64_t at = output + b * kLanes;
              const __mmask16 mine = _mm_mask_cmpeq_epi8_mask(lanes[b], load_positions(positions + at, lanes[b]), here);
              sum[b] = _mm512_mask_add_ps(sum[b], mine, sum[b], load_bf16(grad_y + at, lanes[b]));
            }
          }
        }
        uint16_t* out = grad_x + (h * s.width + w) * s.channels + c0;
        for (int b = 0; b < kBlocks; ++b) store_bf16(out + b * kLanes, lanes[b], sum[b]);
      }
    }
  }
}

#else

void max_pool_image_avx512(const uint16_t*, const PoolShape&, uint16_t*, uint8_t*) {}
void max_pool_grad_image_avx512(const uint16_t*, const uint8_t*, const PoolShape&, uint16_t*) {}

#endif

}  // namespace dpt::models::kernel
