#pragma once
// The resize passes in x86 vector code, chosen at run time: the horizontal one, and the vertical
// one fused with the normalization, in AVX2 and in AVX-512. The scalar horizontal pass does
// 3 x taps multiply-adds per output pixel one at a time; these do a pixel's three channels and two
// (AVX2) or four (AVX-512) taps per instruction with the same 32-bit fixed-point arithmetic, so the
// bytes are identical. Other CPUs (and other architectures, where these are stubs) keep the
// portable code.
// Private to the data layer.

#include <cstddef>
#include <cstdint>
#include <vector>

#include "resample.h"

namespace dpt::data {

// The widest vector extension a pass may use. The passes take the CPU's widest by default; the
// tests name each one the CPU has, so that an AVX-512 machine still checks the AVX2 code.
enum class SimdWidth { None, Avx2, Avx512 };

// What this CPU runs (checked once): AVX-512 means its F and BW subsets, which Intel's server CPUs
// since Skylake and AMD's since Zen 4 have.
SimdWidth best_simd_width();

// Weights of taps whose outputs all have the same tap count, laid out for horizontal_row_simd:
// per output, groups of 4 taps of 16 int32 (each tap's weight once per R, G, B and padding lane).
struct WideTaps {
  int groups = 0;
  std::vector<int32_t> weight;
};
WideTaps widen_taps(const Taps& h);

// Writes the first outputs of one row of the horizontal pass as three planes of h.start.size()
// bytes, like the scalar pass, and returns how many it wrote (the rest are left to the scalar
// pass). `in` is the row's first pixel, at picture column `left`; `readable` counts the bytes
// from `in` to the end of the buffer, which loads must not cross. `width` is Avx2 or Avx512.
int horizontal_row_simd(const uint8_t* in, size_t readable, int left, const Taps& h, const WideTaps& wide,
                        uint8_t* dst, SimdWidth width = best_simd_width());

// One output row of the vertical pass and the normalization, fused: output row `y` of each of
// the three planes (`out` points at row y of the first, `plane` floats apart), from the n
// horizontal-pass rows `rows` (each R, G, B runs of `size` bytes) weighted by k. The same
// products, sums and IEEE float operations in the same order as accumulate_rows + normalize_row,
// so the same floats, for size a multiple of 8 and `out` 32-byte aligned (AVX-512 takes rows whose
// size is a multiple of 16 and `out` 64-byte aligned, AVX2 the others). The sums never leave
// registers, and the floats are written with streaming stores: the batch is read long after, by
// another thread, so writing past the caches saves reading every line of it in first (a 224x224
// sample is 588 KiB, a batch of 32 more than the last-level cache holds). (Gathering the 256
// possible values from a table instead of dividing, and dividing through a reciprocal with an
// FMA correction, measured no faster on AMD Zen 3: the stores bound this loop, as they still do on Zen 5.)
void vertical_row_streaming(const uint8_t* const* rows, const int32_t* k, int n, int size, const float* mean,
                            const float* std, bool flip, float* out, size_t plane,
                            SimdWidth width = best_simd_width());

// Orders the streaming stores before the stores that follow, such as the one publishing the
// finished batch to its consumer.
void fence_streaming_stores();

}  // namespace dpt::data
