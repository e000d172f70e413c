#include "resample.h"

#include <algorithm>
#include <cmath>
#include <iterator>

#include "dptrain/common/error.h"
#include "resample_simd.h"

namespace dpt::data {

namespace {

// PIL's filters: the triangle and the cubic convolution kernel with a = -0.5, by distance in
// input samples (already divided by the shrink factor).
double filter_support(Interpolation filter) { return filter == Interpolation::Bicubic ? 2.0 : 1.0; }

double filter_weight(Interpolation filter, double distance) {
  const double d = std::abs(distance);
  if (filter == Interpolation::Bilinear) return d < 1.0 ? 1.0 - d : 0.0;
  constexpr double a = -0.5;
  if (d < 1.0) return ((a + 2.0) * d - (a + 3.0)) * d * d + 1.0;
  if (d < 2.0) return (((d - 5.0) * d + 8.0) * d - 4.0) * a;
  return 0.0;
}

uint8_t clip8(int32_t v) {
  if (v >= (255 << kPrecisionBits)) return 255;
  if (v <= 0) return 0;
  return static_cast<uint8_t>(v >> kPrecisionBits);
}

// Outputs [first, count) of one row of the horizontal pass, written as three planes (R, G, B) of
// `count` bytes so that the vertical pass can write each output plane contiguously. K > 0 fixes
// the tap count at compile time so the compiler unrolls it; K == 0 reads each output's own length.
template <int K>
void horizontal_row(const uint8_t* in, int left, const Taps& h, int first, int count, uint8_t* dst) {
  for (int x = first; x < count; ++x) {
    const int32_t* k = &h.weight[static_cast<size_t>(x) * h.ksize];
    const uint8_t* src = in + (h.start[x] - left) * 3;
    const int n = K > 0 ? K : h.length[x];
    int32_t s0 = kHalf, s1 = kHalf, s2 = kHalf;
    for (int t = 0; t < n; ++t) {
      s0 += src[3 * t] * k[t];
      s1 += src[3 * t + 1] * k[t];
      s2 += src[3 * t + 2] * k[t];
    }
    dst[x] = clip8(s0);
    dst[count + x] = clip8(s1);
    dst[2 * count + x] = clip8(s2);
  }
}

template <int K>
void horizontal_pass(const Image& image, int left, int top, const Taps& h, int row_first, int row_count, int count,
                     uint8_t* rows) {
  for (int r = 0; r < row_count; ++r) {
    horizontal_row<K>(image.row(row_first + r - top), left, h, 0, count, rows + static_cast<size_t>(r) * count * 3);
  }
}

// The portable pass: unrolled for the common tap counts when all outputs share one.
void horizontal_pass_fallback(const Image& image, int left, int top, const Taps& h, bool fixed, int row_first,
                              int row_count, int count, uint8_t* rows) {
  using Pass = void (*)(const Image&, int, int, const Taps&, int, int, int, uint8_t*);
  // Indexed by the shared tap count; <0> takes any count, one output at a time.
  static constexpr Pass kPasses[] = {horizontal_pass<0>, horizontal_pass<0>, horizontal_pass<2>, horizontal_pass<3>,
                                     horizontal_pass<4>, horizontal_pass<5>, horizontal_pass<6>};
  constexpr int kUnrolled = static_cast<int>(std::size(kPasses));
  const int taps = fixed ? h.length[0] : 0;
  kPasses[taps < kUnrolled ? taps : 0](image, left, top, h, row_first, row_count, count, rows);
}

void horizontal_pass_simd(const Image& image, int left, int top, const Taps& h, int row_first, int row_count,
                          int count, uint8_t* rows) {
  const WideTaps wide = widen_taps(h);
  const uint8_t* end = image.pixels.data() + image.pixels.size();
  for (int r = 0; r < row_count; ++r) {
    const uint8_t* in = image.row(row_first + r - top);
    uint8_t* dst = rows + static_cast<size_t>(r) * count * 3;
    const int done = horizontal_row_simd(in, static_cast<size_t>(end - in), left, h, wide, dst);
    horizontal_row<0>(in, left, h, done, count, dst);
  }
}

// The horizontal pass over the input rows the vertical taps read, rounded to bytes like PIL:
// row r (from v.start.front()) holds R, G and B runs of h.start.size() bytes. Owned by the thread.
const uint8_t* horizontal_rows(const Image& image, int left, int top, const Taps& h, const Taps& v) {
  const int size = static_cast<int>(h.start.size());
  const int row_first = v.start.front();
  const int row_count = v.start.back() + v.length.back() - row_first;
  DPT_ASSERT(row_first >= top && row_first + row_count <= top + image.height,
             "decoded rows do not cover the filter taps");
  thread_local std::vector<uint8_t> rows;
  rows.resize(static_cast<size_t>(row_count) * size * 3);
  const bool fixed = std::all_of(h.length.begin(), h.length.end(), [&](int n) { return n == h.length[0]; });
  if (fixed && best_simd_width() != SimdWidth::None) {
    horizontal_pass_simd(image, left, top, h, row_first, row_count, size, rows.data());
  } else {
    horizontal_pass_fallback(image, left, top, h, fixed, row_first, row_count, size, rows.data());
  }
  return rows.data();
}

// The rows of horizontal_rows' output that output row y of the vertical pass weighs.
void vertical_sources(const uint8_t* rows, int stride, const Taps& v, int y, std::vector<const uint8_t*>& sources) {
  for (int t = 0; t < v.length[y]; ++t) {
    sources[t] = rows + static_cast<size_t>(v.start[y] - v.start.front() + t) * stride;
  }
}

}  // namespace

// One output row of one channel: clamp the fixed-point sums to bytes, normalize in torchvision's
// float32 order of operations (ToTensor's / 255, then Normalize's - mean, / std: IEEE division,
// so the results are bit-identical), mirrored when flip is set. Vectorizes; AVX2 where available.
// (A 256-entry table per channel gives the same values but does not vectorize: it is slower.)
__attribute__((target_clones("avx2", "default"))) void normalize_row(const int32_t* acc, float mean, float std, int n,
                                                                     bool flip, float* out) {
  auto normalized = [&](int x) {
    const float v = static_cast<float>(std::clamp(acc[x] >> kPrecisionBits, 0, 255));
    return (v / 255.0f - mean) / std;
  };
  // Two loops with constant strides: a stride known only at run time defeats the vectorizer.
  if (flip) {
    for (int x = 0; x < n; ++x) out[n - 1 - x] = normalized(x);
  } else {
    for (int x = 0; x < n; ++x) out[x] = normalized(x);
  }
}

// Weighted sum of n byte rows into acc. Vectorizes; AVX2's 32-bit multiply makes it several
// times faster than the SSE2 baseline, so an AVX2 clone is chosen at load time where available.
__attribute__((target_clones("avx2", "default"))) void accumulate_rows(const uint8_t* const* rows, const int32_t* k,
                                                                       int n, int width, int32_t* acc) {
  for (int i = 0; i < width; ++i) acc[i] = kHalf;
  for (int t = 0; t < n; ++t) {
    const uint8_t* src = rows[t];
    const int32_t kt = k[t];
    for (int i = 0; i < width; ++i) acc[i] += src[i] * kt;
  }
}

Taps filter_taps(Interpolation filter, double in0, double in1, int lo, int hi, int out_size, int first, int count) {
  const double scale = (in1 - in0) / out_size;
  const double filter_scale = std::max(scale, 1.0);
  const double support = filter_support(filter) * filter_scale;
  const double inv_filter_scale = 1.0 / filter_scale;
  Taps taps;
  taps.ksize = static_cast<int>(std::ceil(support)) * 2 + 1;
  taps.start.resize(count);
  taps.length.resize(count);
  taps.weight.assign(static_cast<size_t>(count) * taps.ksize, 0);
  std::vector<double> w(taps.ksize);
  for (int i = 0; i < count; ++i) {
    const double center = in0 + (first + i + 0.5) * scale;
    const int xmin = std::max(static_cast<int>(std::floor(center - support + 0.5)), lo);
    const int xmax = std::min(static_cast<int>(std::floor(center + support + 0.5)), hi);
    const int n = std::max(xmax - xmin, 0);
    double total = 0;
    for (int x = 0; x < n; ++x) {
      w[x] = filter_weight(filter, (x + xmin - center + 0.5) * inv_filter_scale);
      total += w[x];
    }
    int32_t* k = &taps.weight[static_cast<size_t>(i) * taps.ksize];
    for (int x = 0; x < n; ++x) {
      const double normalized = (total != 0.0 ? w[x] / total : w[x]) * (1 << kPrecisionBits);
      // PIL rounds half away from zero, negative lobes too.
      k[x] = static_cast<int32_t>(normalized < 0 ? normalized - 0.5 : normalized + 0.5);
    }
    taps.start[i] = xmin;
    taps.length[i] = n;
  }
  return taps;
}

void pad_taps(Taps& taps, int limit) {
  // The longest output's tap count, not ksize: for shrink factors just above 1 (typical of
  // RandomResizedCrop) ksize is 5 but no output reads more than 4 inputs.
  const int n = *std::max_element(taps.length.begin(), taps.length.end());
  if (limit < n) return;
  for (size_t i = 0; i < taps.start.size(); ++i) {
    const int shift = std::max(taps.start[i] + n - limit, 0);
    int32_t* k = &taps.weight[i * taps.ksize];
    if (shift > 0) {
      std::copy_backward(k, k + taps.length[i], k + taps.length[i] + shift);
      std::fill(k, k + shift, 0);
      taps.start[i] -= shift;
    }
    taps.length[i] = n;
  }
}

void resample(const Image& image, int left, int top, const Taps& h, const Taps& v, bool flip,
              const std::array<float, 3>& mean, const std::array<float, 3>& std, float* out) {
  const int size = static_cast<int>(h.start.size());
  const int stride = size * 3;
  const uint8_t* rows = horizontal_rows(image, left, top, h, v);
  thread_local std::vector<int32_t> acc;
  acc.resize(stride);

  // Vertical pass, then clamp, flip and normalize into the three CHW planes.
  const size_t plane = static_cast<size_t>(size) * size;
  // Every row starts 32-byte aligned when the first does and rows are whole vectors (64-byte, for
  // AVX-512, when rows are whole 16-float vectors: vertical_row_streaming checks).
  const bool streaming =
      best_simd_width() != SimdWidth::None && size % 8 == 0 && reinterpret_cast<uintptr_t>(out) % 32 == 0;
  std::vector<const uint8_t*> sources(v.ksize);
  for (int y = 0; y < size; ++y) {
    vertical_sources(rows, stride, v, y, sources);
    const int32_t* weights = &v.weight[static_cast<size_t>(y) * v.ksize];
    float* dst = out + static_cast<size_t>(y) * size;
    if (streaming) {
      vertical_row_streaming(sources.data(), weights, v.length[y], size, mean.data(), std.data(), flip, dst, plane);
      continue;
    }
    accumulate_rows(sources.data(), weights, v.length[y], stride, acc.data());
    for (int c = 0; c < 3; ++c) {
      normalize_row(&acc[static_cast<size_t>(c) * size], mean[c], std[c], size, flip, dst + c * plane);
    }
  }
  if (streaming) fence_streaming_stores();
}

void resample_to_image(const Image& image, int left, int top, const Taps& h, const Taps& v, bool flip, Image& out) {
  const int width = static_cast<int>(h.start.size());
  const int height = static_cast<int>(v.start.size());
  const int stride = width * 3;
  const uint8_t* rows = horizontal_rows(image, left, top, h, v);
  thread_local std::vector<int32_t> acc;
  acc.resize(stride);
  out.width = width;
  out.height = height;
  out.pixels.resize(static_cast<size_t>(height) * stride);
  std::vector<const uint8_t*> sources(v.ksize);
  for (int y = 0; y < height; ++y) {
    vertical_sources(rows, stride, v, y, sources);
    accumulate_rows(sources.data(), &v.weight[static_cast<size_t>(y) * v.ksize], v.length[y], stride, acc.data());
    // The planes back to interleaved RGB, mirrored when flip is set.
    uint8_t* dst = out.row(y);
    for (int c = 0; c < 3; ++c) {
      const int32_t* plane = &acc[static_cast<size_t>(c) * width];
      for (int x = 0; x < width; ++x) {
        dst[(flip ? width - 1 - x : x) * 3 + c] = static_cast<uint8_t>(std::clamp(plane[x] >> kPrecisionBits, 0, 255));
      }
    }
  }
}

void normalize_image(const Image& image, const std::array<float, 3>& mean, const std::array<float, 3>& std,
                     float* out) {
  const size_t plane = static_cast<size_t>(image.width) * image.height;
  for (int c = 0; c < 3; ++c) {
    float* dst = out + c * plane;
    for (size_t i = 0; i < plane; ++i) {
      dst[i] = (static_cast<float>(image.pixels[i * 3 + c]) / 255.0f - mean[c]) / std[c];
    }
  }
}

}  // namespace dpt::data
