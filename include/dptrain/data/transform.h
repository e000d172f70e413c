#pragma once
// torchvision's ImageNet transforms, fused: decode (at a reduced DCT scale when that is enough),
// crop, resize, flip, convert to float and normalize in one pass into the caller's CHW buffer.
//
//   Train: RandomResizedCrop(size, scale, ratio) + RandomHorizontalFlip
//          [+ AutoAugment / RandAugment / TrivialAugmentWide / AugMix] + Normalize(mean, std)
//          [+ RandomErasing(p, value=0)]
//   Eval:  Resize(resize) + CenterCrop(size) + Normalize(mean, std)
//
//   dpt::data::Transform t(dpt::data::TransformOptions().mode(dpt::data::TransformMode::Train).seed(1));
//   std::vector<float> out(t.sample_numel());
//   t.apply_encoded(jpeg_bytes, "cat.jpg", /*epoch=*/0, /*index=*/17, out.data());
//
// Resizing follows PIL's bilinear or bicubic filter (what torchvision uses on the PIL images
// ImageFolder loads): antialiased when shrinking, 22-bit fixed-point weights, intermediate rows
// rounded to 8 bits. Only the JPEG rows and block columns the filter reads are decoded. At full scale
// (dct_scaling(false), or crops too small for a 1/2 decode) the output equals torchvision's
// bit for bit; with DCT scaling it differs by a few levels because libjpeg's downscaled IDCT
// replaces the first part of the filter (see transform_test.cpp for the bounds).

#include <torch/arg.h>

#include <array>
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "dptrain/data/auto_augment.h"
#include "dptrain/data/image.h"
#include "dptrain/data/interpolation.h"
#include "dptrain/data/random.h"

namespace dpt::data {

enum class TransformMode { Train, Eval };

// One value per RGB channel.
using ChannelValues = std::array<float, 3>;

struct TransformOptions {
  TORCH_ARG(TransformMode, mode) = TransformMode::Eval;
  // Side of the square output (RandomResizedCrop size, or CenterCrop size).
  TORCH_ARG(int, size) = 224;
  // Eval only: the shorter side is resized to this before the center crop.
  TORCH_ARG(int, resize) = 256;
  // Train only: crop area fraction and aspect ratio ranges of RandomResizedCrop.
  TORCH_ARG(double, scale_min) = 0.08;
  TORCH_ARG(double, scale_max) = 1.0;
  TORCH_ARG(double, ratio_min) = 3.0 / 4.0;
  TORCH_ARG(double, ratio_max) = 4.0 / 3.0;
  // The resize filter of both modes (torchvision's `interpolation`).
  TORCH_ARG(Interpolation, interpolation) = Interpolation::Bilinear;
  // Train only: probability of a horizontal flip.
  TORCH_ARG(double, flip_probability) = 0.5;
  // Train only: probability of RandomErasing (zeroing a rectangle of 2-33% of the normalised
  // output, aspect ratio 0.3-3.3, as torchvision's defaults).
  TORCH_ARG(double, erase_probability) = 0.0;
  // Train only: an automatic augmentation policy, run on the bytes of the flipped crop (which
  // then takes a slower, unfused path: resize to bytes, augment, normalize).
  TORCH_ARG(std::optional<AutoAugmentOptions>, auto_augment);
  // Per-channel normalization, applied to pixel / 255.
  TORCH_ARG(ChannelValues, mean) = {0.485f, 0.456f, 0.406f};
  TORCH_ARG(ChannelValues, std) = {0.229f, 0.224f, 0.225f};
  // Decode JPEGs at 1/2, 1/4 or 1/8 size when that still covers the crop at the output size.
  TORCH_ARG(bool, dct_scaling) = true;
  // Seed of the augmentation; a sample's crop and flip depend on (seed, epoch, index) only.
  TORCH_ARG(uint64_t, seed) = 0;
};

// A rectangle of the output that RandomErasing zeroes: rows [top, top + height), columns
// [left, left + width), every channel.
struct EraseBox {
  int top = 0, left = 0, height = 0, width = 0;
};

// Where the output comes from, in the coordinates of the full-resolution image: the region
// [left, left + width) x [top, top + height) is resized to out_width x out_height, and the window
// [window_left, + size) x [window_top, + size) of that is kept (the whole of it for train crops,
// the center for eval), mirrored when flip is set, augmented from `augment`'s draws when set,
// then `erase` zeroed when set.
struct CropPlan {
  int left = 0, top = 0, width = 0, height = 0;
  int out_width = 0, out_height = 0;
  int window_left = 0, window_top = 0;
  bool flip = false;
  std::optional<SampleRng> augment;
  std::optional<EraseBox> erase;
};

struct Taps;  // filter taps of the resize (private to the data layer)

class Transform {
 public:
  explicit Transform(TransformOptions options);

  const TransformOptions& options() const { return options_; }
  // {3, size, size}
  std::vector<int64_t> sample_shape() const;
  int64_t sample_numel() const;

  // The crop, resize, flip, augmentation and erasing of one sample of a width x height image.
  CropPlan plan(int width, int height, int64_t epoch, int64_t index) const;

  // Runs the plan on an RGB image, writing 3 x size x size floats to out.
  void apply(const Image& image, const CropPlan& plan, float* out) const;
  void apply(const Image& image, int64_t epoch, int64_t index, float* out) const;
  // Decodes JPEG or PNG bytes (DataError naming `name` if they are bad) and transforms them.
  void apply_encoded(const std::vector<uint8_t>& bytes, const std::string& name, int64_t epoch, int64_t index,
                     float* out) const;

 private:
  // The plan's resize with taps (h, v) from `image` (pixels from (left, top) of the picture),
  // then its augmentation, normalization and erasing, into out.
  void run_plan(const Image& image, int left, int top, const Taps& h, const Taps& v, const CropPlan& plan,
                float* out) const;

  TransformOptions options_;
  std::optional<AutoAugment> augment_;
};

}  // namespace dpt::data
