#include "resample_simd.h"

#include <cstddef>
#include <cstring>

#if defined(__x86_64__) || defined(__i386__)
#include <immintrin.h>
#define DPT_RESAMPLE_X86 1
#endif

namespace dpt::data {

#if defined(DPT_RESAMPLE_X86)

// GCC 12's AVX-512 intrinsics start from an undefined vector, which -Wmaybe-uninitialized reports
// wherever one is inlined (GCC bug 105593, fixed in GCC 13). Popped at the end of the x86 code:
// in a unity build the next file follows.
#if !defined(__clang__)
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#endif

SimdWidth best_simd_width() {
  static const SimdWidth width = __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw")
                                     ? SimdWidth::Avx512
                                 : __builtin_cpu_supports("avx2") ? SimdWidth::Avx2
                                                                  : SimdWidth::None;
  return width;
}

WideTaps widen_taps(const Taps& h) {
  WideTaps wide;
  const int n = h.length.front();
  wide.groups = (n + 3) / 4;
  const size_t per_output = static_cast<size_t>(wide.groups) * 16;
  wide.weight.assign(h.start.size() * per_output, 0);
  for (size_t x = 0; x < h.start.size(); ++x) {
    int32_t* w = &wide.weight[x * per_output];
    for (int t = 0; t < n; ++t) {
      // Tap t is pixel t % 4 of group t / 4: its weight fills that pixel's four int32 lanes.
      for (int lane = 0; lane < 4; ++lane) w[(t / 4) * 16 + (t % 4) * 4 + lane] = h.weight[x * h.ksize + t];
    }
  }
  return wide;
}

namespace {

// Fixed-point R, G, B sums (lane 3 unused) of one output pixel, shifted down to 8-bit range but
// not yet clamped. Each group loads 16 bytes, of which 4 RGB pixels (12 bytes) are used, spreads
// them to 32-bit lanes, two pixels per vector, and multiplies them by their tap weights: the same
// int32 products and sums as the scalar pass. G > 0 fixes the group count at compile time so the
// loop unrolls and the sums stay in registers; G == 0 takes it from `groups`.
template <int G>
__attribute__((target("avx2"))) inline __m128i pixel_sums_avx2(const uint8_t* src, const int32_t* w, int groups) {
  const __m256i first_pair = _mm256_setr_epi8(0, -1, -1, -1, 1, -1, -1, -1, 2, -1, -1, -1, -1, -1, -1, -1,  //
                                              3, -1, -1, -1, 4, -1, -1, -1, 5, -1, -1, -1, -1, -1, -1, -1);
  const __m256i second_pair = _mm256_setr_epi8(6, -1, -1, -1, 7, -1, -1, -1, 8, -1, -1, -1, -1, -1, -1, -1,  //
                                               9, -1, -1, -1, 10, -1, -1, -1, 11, -1, -1, -1, -1, -1, -1, -1);
  const int n = G > 0 ? G : groups;
  __m256i acc = _mm256_setzero_si256();
  for (int g = 0; g < n; ++g) {
    const __m256i px = _mm256_broadcastsi128_si256(_mm_loadu_si128(reinterpret_cast<const __m128i*>(src + 12 * g)));
    const __m256i* wg = reinterpret_cast<const __m256i*>(w + 16 * g);
    acc = _mm256_add_epi32(acc, _mm256_mullo_epi32(_mm256_shuffle_epi8(px, first_pair), _mm256_loadu_si256(wg)));
    acc = _mm256_add_epi32(acc, _mm256_mullo_epi32(_mm256_shuffle_epi8(px, second_pair), _mm256_loadu_si256(wg + 1)));
  }
  const __m128i sum = _mm_add_epi32(_mm256_castsi256_si128(acc), _mm256_extracti128_si256(acc, 1));
  return _mm_srai_epi32(_mm_add_epi32(sum, _mm_set1_epi32(kHalf)), kPrecisionBits);
}

// The same sums with four pixels per vector, one to each 128-bit lane, left unreduced: the lanes
// of four outputs are added together by four_outputs_avx512.
template <int G>
__attribute__((target("avx512f,avx512bw"))) inline __m512i pixel_sums_avx512(const uint8_t* src, const int32_t* w,
                                                                              int groups) {
  // The 16 bytes are in every lane; lane j takes pixel j's three (bytes 3j to 3j + 2).
  const __m512i spread = _mm512_set_epi8(-1, -1, -1, -1, -1, -1, -1, 11, -1, -1, -1, 10, -1, -1, -1, 9,  //
                                         -1, -1, -1, -1, -1, -1, -1, 8, -1, -1, -1, 7, -1, -1, -1, 6,    //
                                         -1, -1, -1, -1, -1, -1, -1, 5, -1, -1, -1, 4, -1, -1, -1, 3,    //
                                         -1, -1, -1, -1, -1, -1, -1, 2, -1, -1, -1, 1, -1, -1, -1, 0);
  const int n = G > 0 ? G : groups;
  __m512i acc = _mm512_setzero_si512();
  for (int g = 0; g < n; ++g) {
    const __m512i px = _mm512_broadcast_i32x4(_mm_loadu_si128(reinterpret_cast<const __m128i*>(src + 12 * g)));
    acc = _mm512_add_epi32(acc, _mm512_mullo_epi32(_mm512_shuffle_epi8(px, spread), _mm512_loadu_si512(w + 16 * g)));
  }
  return acc;
}

// Four outputs' R, G, B, x bytes: their pixel sums' lanes added (a transpose by 128-bit lanes),
// rounded and shifted down, then saturated to bytes like clip8 (negative to 0 by the max, above
// 255 to 255 by the unsigned narrowing).
__attribute__((target("avx512f,avx512bw"))) inline __m128i four_outputs_avx512(__m512i s0, __m512i s1, __m512i s2,
                                                                               __m512i s3) {
  const __m512i pairs01 = _mm512_add_epi32(_mm512_shuffle_i32x4(s0, s1, 0x44), _mm512_shuffle_i32x4(s0, s1, 0xEE));
  const __m512i pairs23 = _mm512_add_epi32(_mm512_shuffle_i32x4(s2, s3, 0x44), _mm512_shuffle_i32x4(s2, s3, 0xEE));
  const __m512i sums =
      _mm512_add_epi32(_mm512_shuffle_i32x4(pairs01, pairs23, 0x88), _mm512_shuffle_i32x4(pairs01, pairs23, 0xDD));
  const __m512i shifted = _mm512_srai_epi32(_mm512_add_epi32(sums, _mm512_set1_epi32(kHalf)), kPrecisionBits);
  return _mm512_cvtusepi32_epi8(_mm512_max_epi32(shifted, _mm512_setzero_si512()));
}

// Four outputs' bytes, R G B x per pixel, regrouped into 4 R, 4 G and 4 B for the planar rows
// (`dst` is the first output's place in the R row).
__attribute__((target("sse4.1"))) inline void store_planar(__m128i bytes, int count, uint8_t* dst) {
  const __m128i planar = _mm_setr_epi8(0, 4, 8, 12, 1, 5, 9, 13, 2, 6, 10, 14, 3, 7, 11, 15);
  const __m128i regrouped = _mm_shuffle_epi8(bytes, planar);
  const int32_t r = _mm_cvtsi128_si32(regrouped);
  const int32_t g = _mm_extract_epi32(regrouped, 1), b = _mm_extract_epi32(regrouped, 2);
  std::memcpy(dst, &r, 4);
  std::memcpy(dst + count, &g, 4);
  std::memcpy(dst + 2 * count, &b, 4);
}

// Outputs [0, end) in fours; packing saturates like clip8 (negative to 0, above 255 to 255).
template <int G>
__attribute__((target("avx2"))) int horizontal_quads_avx2(const uint8_t* in, int left, const Taps& h,
                                                          const WideTaps& wide, int end, uint8_t* dst) {
  const size_t per_output = static_cast<size_t>(wide.groups) * 16;
  const int* start = h.start.data();
  const int32_t* w = wide.weight.data();
  int x = 0;
  for (; x + 4 <= end; x += 4, start += 4, w += 4 * per_output) {
    __m128i s[4];
    for (int q = 0; q < 4; ++q) {
      const uint8_t* src = in + static_cast<std::ptrdiff_t>(start[q] - left) * 3;
      s[q] = pixel_sums_avx2<G>(src, w + q * per_output, wide.groups);
    }
    const __m128i bytes = _mm_packus_epi16(_mm_packs_epi32(s[0], s[1]), _mm_packs_epi32(s[2], s[3]));
    store_planar(bytes, static_cast<int>(h.start.size()), dst + x);
  }
  return x;
}

template <int G>
__attribute__((target("avx512f,avx512bw"))) int horizontal_quads_avx512(const uint8_t* in, int left, const Taps& h,
                                                                        const WideTaps& wide, int end, uint8_t* dst) {
  const size_t per_output = static_cast<size_t>(wide.groups) * 16;
  const int* start = h.start.data();
  const int32_t* w = wide.weight.data();
  int x = 0;
  for (; x + 4 <= end; x += 4, start += 4, w += 4 * per_output) {
    __m512i s[4];
    for (int q = 0; q < 4; ++q) {
      const uint8_t* src = in + static_cast<std::ptrdiff_t>(start[q] - left) * 3;
      s[q] = pixel_sums_avx512<G>(src, w + q * per_output, wide.groups);
    }
    store_planar(four_outputs_avx512(s[0], s[1], s[2], s[3]), static_cast<int>(h.start.size()), dst + x);
  }
  return x;
}

template <int G>
int horizontal_quads(const uint8_t* in, int left, const Taps& h, const WideTaps& wide, int end, uint8_t* dst,
                     SimdWidth width) {
  return width == SimdWidth::Avx512 ? horizontal_quads_avx512<G>(in, left, h, wide, end, dst)
                                    : horizontal_quads_avx2<G>(in, left, h, wide, end, dst);
}

}  // namespace

int horizontal_row_simd(const uint8_t* in, size_t readable, int left, const Taps& h, const WideTaps& wide,
                        uint8_t* dst, SimdWidth width) {
  const int count = static_cast<int>(h.start.size());
  // An output may load 16 bytes past the start of its last group; those near the end of the
  // buffer are left to the scalar pass.
  const size_t span = static_cast<size_t>(12 * (wide.groups - 1) + 16);
  int safe = count;
  while (safe > 0 && static_cast<size_t>(h.start[safe - 1] - left) * 3 + span > readable) --safe;
  // Up to 8 taps (shrinks below about 3.5x, what RandomResizedCrop mostly asks after DCT scaling)
  // get an unrolled loop.
  switch (wide.groups) {
    case 1:
      return horizontal_quads<1>(in, left, h, wide, safe, dst, width);
    case 2:
      return horizontal_quads<2>(in, left, h, wide, safe, dst, width);
    default:
      return horizontal_quads<0>(in, left, h, wide, safe, dst, width);
  }
}

namespace {

__attribute__((target("avx2"))) void vertical_row_avx2(const uint8_t* const* rows, const int32_t* k, int n, int size,
                                                       const float* mean, const float* std, bool flip, float* out,
                                                       size_t plane) {
  const __m256i low = _mm256_setzero_si256(), high = _mm256_set1_epi32(255), half = _mm256_set1_epi32(kHalf);
  const __m256 scale = _mm256_set1_ps(255.0f);
  const __m256i reverse = _mm256_setr_epi32(7, 6, 5, 4, 3, 2, 1, 0);
  for (int c = 0; c < 3; ++c) {
    const __m256 m = _mm256_set1_ps(mean[c]), s = _mm256_set1_ps(std[c]);
    const size_t column = static_cast<size_t>(c) * size;
    float* dst = out + c * plane;
    for (int x = 0; x < size; x += 8) {
      // The vertical taps' fixed-point sum for 8 outputs, kept in a register: accumulate_rows'
      // products and sums.
      __m256i acc = half;
      for (int t = 0; t < n; ++t) {
        const __m128i bytes = _mm_loadl_epi64(reinterpret_cast<const __m128i*>(rows[t] + column + x));
        acc = _mm256_add_epi32(acc, _mm256_mullo_epi32(_mm256_cvtepu8_epi32(bytes), _mm256_set1_epi32(k[t])));
      }
      // normalize_row: clamp to a byte, then the same IEEE operations in the same order.
      const __m256i v = _mm256_min_epi32(_mm256_max_epi32(_mm256_srai_epi32(acc, kPrecisionBits), low), high);
      const __m256 f = _mm256_div_ps(_mm256_sub_ps(_mm256_div_ps(_mm256_cvtepi32_ps(v), scale), m), s);
      if (flip) {
        _mm256_stream_ps(dst + size - 8 - x, _mm256_permutevar8x32_ps(f, reverse));
      } else {
        _mm256_stream_ps(dst + x, f);
      }
    }
  }
}

// The same for 16 outputs at a time: a streaming store then writes a whole cache line.
__attribute__((target("avx512f,avx512bw"))) void vertical_row_avx512(const uint8_t* const* rows, const int32_t* k,
                                                                     int n, int size, const float* mean,
                                                                     const float* std, bool flip, float* out,
                                                                     size_t plane) {
  const __m512i low = _mm512_setzero_si512(), high = _mm512_set1_epi32(255), half = _mm512_set1_epi32(kHalf);
  const __m512 scale = _mm512_set1_ps(255.0f);
  const __m512i reverse = _mm512_setr_epi32(15, 14, 13, 12, 11, 10, 9, 8, 7, 6, 5, 4, 3, 2, 1, 0);
  for (int c = 0; c < 3; ++c) {
    const __m512 m = _mm512_set1_ps(mean[c]), s = _mm512_set1_ps(std[c]);
    const size_t column = static_cast<size_t>(c) * size;
    float* dst = out + c * plane;
    for (int x = 0; x < size; x += 16) {
      __m512i acc = half;
      for (int t = 0; t < n; ++t) {
        const __m128i bytes = _mm_loadu_si128(reinterpret_cast<const __m128i*>(rows[t] + column + x));
        acc = _mm512_add_epi32(acc, _mm512_mullo_epi32(_mm512_cvtepu8_epi32(bytes), _mm512_set1_epi32(k[t])));
      }
      const __m512i v = _mm512_min_epi32(_mm512_max_epi32(_mm512_srai_epi32(acc, kPrecisionBits), low), high);
      const __m512 f = _mm512_div_ps(_mm512_sub_ps(_mm512_div_ps(_mm512_cvtepi32_ps(v), scale), m), s);
      _mm512_stream_ps(flip ? dst + size - 16 - x : dst + x, flip ? _mm512_permutexvar_ps(reverse, f) : f);
    }
  }
}

}  // namespace

void vertical_row_streaming(const uint8_t* const* rows, const int32_t* k, int n, int size, const float* mean,
                            const float* std, bool flip, float* out, size_t plane, SimdWidth width) {
  if (width == SimdWidth::Avx512 && size % 16 == 0 && reinterpret_cast<uintptr_t>(out) % 64 == 0) {
    vertical_row_avx512(rows, k, n, size, mean, std, flip, out, plane);
  } else {
    vertical_row_avx2(rows, k, n, size, mean, std, flip, out, plane);
  }
}

void fence_streaming_stores() { _mm_sfence(); }

#if !defined(__clang__)
#pragma GCC diagnostic pop
#endif

#else

SimdWidth best_simd_width() { return SimdWidth::None; }
WideTaps widen_taps(const Taps&) { return {}; }
int horizontal_row_simd(const uint8_t*, size_t, int, const Taps&, const WideTaps&, uint8_t*, SimdWidth) { return 0; }
void vertical_row_streaming(const uint8_t* const*, const int32_t*, int, int, const float*, const float*, bool, float*,
                            size_t, SimdWidth) {}
void fence_streaming_stores() {}

#endif

}  // namespace dpt::data
