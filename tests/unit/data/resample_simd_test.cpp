#include "data/resample_simd.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cstdint>
#include <random>
#include <vector>

using namespace dpt::data;

// The vector kernels against PIL's fixed-point arithmetic written out one value at a time, for
// every width this CPU runs: the transform tests reach only the widest, so on an AVX-512 machine
// the AVX2 kernels are checked here alone.

namespace {

std::vector<SimdWidth> widths_here() {
  std::vector<SimdWidth> widths;
  if (best_simd_width() >= SimdWidth::Avx2) widths.push_back(SimdWidth::Avx2);
  if (best_simd_width() >= SimdWidth::Avx512) widths.push_back(SimdWidth::Avx512);
  return widths;
}

const char* name(SimdWidth width) { return width == SimdWidth::Avx512 ? "AVX-512" : "AVX2"; }

std::vector<uint8_t> random_bytes(size_t n, uint32_t seed) {
  std::mt19937 gen(seed);
  std::uniform_int_distribution<int> byte(0, 255);
  std::vector<uint8_t> bytes(n);
  for (auto& b : bytes) b = static_cast<uint8_t>(byte(gen));
  return bytes;
}

uint8_t clamped_byte(int32_t sum) { return static_cast<uint8_t>(std::clamp(sum >> kPrecisionBits, 0, 255)); }

// `count` floats starting on a 64-byte boundary, as the loader's batches start.
class AlignedFloats {
 public:
  explicit AlignedFloats(size_t count) : storage_(count + 16) {
    const auto address = reinterpret_cast<uintptr_t>(storage_.data());
    data_ = storage_.data() + ((64 - address % 64) % 64) / sizeof(float);
  }
  float* data() { return data_; }

 private:
  std::vector<float> storage_;
  float* data_;
};

}  // namespace

// Upscales (2 taps) to 5x shrinks (11 taps, three groups of four), bilinear and bicubic (whose
// negative lobes push some sums of random pixels below 0 and above 255 when enlarging, where the
// saturation must clamp as clip8 does).
TEST(ResampleSimd, HorizontalKernelsEqualTheFixedPointSums) {
  if (widths_here().empty()) GTEST_SKIP() << "this CPU has no AVX2: only the portable pass runs";
  constexpr int kInputs = 300;
  // Readable bytes past the row, so that the kernels may load up to its end.
  const std::vector<uint8_t> row = random_bytes(kInputs * 3 + 64, 11);
  int clamped = 0;
  for (const Interpolation filter : {Interpolation::Bilinear, Interpolation::Bicubic}) {
    for (const int outputs : {500, 224, 136, 76, 60}) {
      Taps h = filter_taps(filter, 0.0, kInputs, 0, kInputs, outputs, 0, outputs);
      pad_taps(h, kInputs);
      const WideTaps wide = widen_taps(h);
      std::vector<uint8_t> expected(outputs * 3);
      for (int x = 0; x < outputs; ++x) {
        for (int c = 0; c < 3; ++c) {
          int32_t sum = kHalf;
          for (int t = 0; t < h.length[x]; ++t) sum += row[(h.start[x] + t) * 3 + c] * h.weight[x * h.ksize + t];
          expected[c * outputs + x] = clamped_byte(sum);
          clamped += sum < 0 || sum >= (256 << kPrecisionBits);
        }
      }
      for (const SimdWidth width : widths_here()) {
        std::vector<uint8_t> got(outputs * 3, 0);
        const int done = horizontal_row_simd(row.data(), row.size(), 0, h, wide, got.data(), width);
        EXPECT_EQ(done, outputs) << name(width) << ", " << outputs << " outputs";
        EXPECT_EQ(got, expected) << name(width) << ", " << outputs << " outputs";
      }
    }
  }
  EXPECT_GT(clamped, 0);
}

// Rows of 32 outputs take either kernel; rows of 24 (not whole 16-float vectors) take AVX2's
// even where AVX-512 is asked for. Flipped and not, with tap weights whose sums leave [0, 255].
TEST(ResampleSimd, VerticalKernelsEqualTheNormalizedSums) {
  if (widths_here().empty()) GTEST_SKIP() << "this CPU has no AVX2: only the portable pass runs";
  const std::vector<int32_t> weights = {-(1 << 19), (5 << 19) + 3, (5 << 19) - 3, -(1 << 19)};  // sum 2^22
  const float mean[3] = {0.485f, 0.456f, 0.406f}, std[3] = {0.229f, 0.224f, 0.225f};
  for (const int size : {32, 24}) {
    const int n = static_cast<int>(weights.size());
    std::vector<std::vector<uint8_t>> rows;
    std::vector<const uint8_t*> sources;
    for (int t = 0; t < n; ++t) rows.push_back(random_bytes(size * 3, 20 + t));
    for (const auto& r : rows) sources.push_back(r.data());
    const size_t plane = static_cast<size_t>(size) * 2;  // planes apart, as rows of a sample are
    for (const bool flip : {false, true}) {
      std::vector<float> expected(plane * 3, 0.0f);
      int clamped = 0;
      for (int c = 0; c < 3; ++c) {
        for (int x = 0; x < size; ++x) {
          int32_t sum = kHalf;
          for (int t = 0; t < n; ++t) sum += rows[t][c * size + x] * weights[t];
          clamped += sum < 0 || sum >= (256 << kPrecisionBits);
          const float v = clamped_byte(sum);
          expected[c * plane + (flip ? size - 1 - x : x)] = (v / 255.0f - mean[c]) / std[c];
        }
      }
      EXPECT_GT(clamped, 0);
      for (const SimdWidth width : widths_here()) {
        AlignedFloats out(plane * 3);
        std::fill(out.data(), out.data() + plane * 3, 0.0f);
        vertical_row_streaming(sources.data(), weights.data(), n, size, mean, std, flip, out.data(), plane, width);
        fence_streaming_stores();
        EXPECT_EQ(std::vector<float>(out.data(), out.data() + plane * 3), expected)
            << name(width) << ", " << size << " outputs" << (flip ? ", flipped" : "");
      }
    }
  }
}
