#pragma once
// PIL's bilinear and bicubic resize, as the fused transform runs it: filter taps per output
// pixel, a horizontal pass into byte rows, a vertical pass, then normalization into CHW float
// planes (or, when augmentations must see the bytes first, an RGB image and a separate
// normalization).
// Private to the data layer.

#include <array>
#include <cstdint>
#include <vector>

#include "dptrain/data/image.h"
#include "dptrain/data/interpolation.h"

namespace dpt::data {

// PIL's fixed point: weights scaled by 2^22 leave room for 255 * (sum of weights) in int32.
constexpr int kPrecisionBits = 32 - 8 - 2;
constexpr int32_t kHalf = 1 << (kPrecisionBits - 1);

// Taps of one resize direction for the outputs of a window: output i reads length[i] inputs from
// start[i] with 22-bit fixed-point weights (ksize slots reserved per output).
struct Taps {
  int ksize = 0;
  std::vector<int> start;
  std::vector<int> length;
  std::vector<int32_t> weight;
};

// Taps for outputs [first, first + count) of resizing the input span [in0, in1) to out_size
// samples, reading only inputs in [lo, hi). Same arithmetic as PIL's precompute_coeffs: the
// filter is widened by the shrink factor (antialiasing), taps are normalized to sum to one, then
// rounded to fixed point (bicubic's negative lobes included).
Taps filter_taps(Interpolation filter, double in0, double in1, int lo, int hi, int out_size, int first, int count);

// Gives every output the same number of taps, the largest any output has (zero weights added,
// start moved left where the row would end past `limit`), so the horizontal pass can run a
// fixed-length, unrolled loop. The sums are unchanged. Leaves the taps as they were when the
// image is narrower than that.
void pad_taps(Taps& taps, int limit);

// Resizes, flips and normalizes ((v / 255 - mean) / std per channel) into out: 3 planes of
// size x size floats. `image` holds pixels [left, left + width) x [top, top + height) of the
// picture the taps index.
void resample(const Image& image, int left, int top, const Taps& h, const Taps& v, bool flip,
              const std::array<float, 3>& mean, const std::array<float, 3>& std, float* out);

// The same resize and flip, stopping at bytes: `out` becomes the RGB image, as wide as `h` has
// outputs and as tall as `v` has, that PIL would hand the transforms after the resize
// (AutoAugment's ops), or that PIL's Image.resize gives (make-shards' --max-side).
void resample_to_image(const Image& image, int left, int top, const Taps& h, const Taps& v, bool flip, Image& out);

// ToTensor + Normalize of an RGB image into three CHW planes, in the order of operations above.
void normalize_image(const Image& image, const std::array<float, 3>& mean, const std::array<float, 3>& std,
                     float* out);

}  // namespace dpt::data
