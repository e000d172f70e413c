#pragma once
// The horizontal resize pass and the normalization in AVX2, chosen at run time. The scalar pass
// does 3 x taps multiply-adds per output pixel one at a time, this one does a pixel's three
// channels and two taps per instruction with the same 32-bit fixed-point arithmetic, so the bytes
// are identical. Other CPUs (and other architectures, where these are stubs) keep the portable code.
// Private to the data layer.

#include <cstddef>
#include <cstdint>
#include <vector>

#include "resample.h"

namespace dpt::data {

// Whether this CPU runs AVX2 (checked once).
bool have_avx2();

// Weights of taps whose outputs all have the same tap count, laid out for horizontal_row_avx2:
// per output, groups of 4 taps of 16 int32 (each tap's weight once per R, G, B and padding lane).
struct WideTaps {
  int groups = 0;
  std::vector<int32_t> weight;
};
WideTaps widen_taps(const Taps& h);

// Writes the first outputs of one row of the horizontal pass as three planes of h.start.size()
// bytes, like the scalar pass, and returns how many it wrote (the rest are left to the scalar
// pass). `in` is the row's first pixel, at picture column `left`; `readable` counts the bytes
// from `in` to the end of the buffer, which loads must not cross.
int horizontal_row_avx2(const uint8_t* in, size_t readable, int left, const Taps& h, const WideTaps& wide,
                        uint8_t* dst);

// normalize_row for n a multiple of 8 and `out` 32-byte aligned: the same IEEE operations in
// the same order (so the same floats), written with streaming stores. The batch is read long
// after, by another thread, so writing past the caches saves reading every line of it in first
// (a 224x224 sample is 588 KiB, a batch of 32 more than the last-level cache holds). Gathering
// the 256 possible values from a table instead of dividing measured slower on AMD Zen 3.
void normalize_row_streaming(const int32_t* acc, float mean, float std, int n, bool flip, float* out);

// Orders the streaming stores before the stores that follow, such as the one publishing the
// finished batch to its consumer.
void fence_streaming_stores();

}  // namespace dpt::data
