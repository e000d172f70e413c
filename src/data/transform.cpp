#include "dptrain/data/transform.h"

#include <algorithm>
#include <cmath>

#include "dptrain/common/error.h"
#include "dptrain/data/random.h"
#include "resample.h"

namespace dpt::data {

namespace {

// Horizontal and vertical taps of a plan on a `scaled` decode of a `full`-sized image.
std::pair<Taps, Taps> plan_taps(const CropPlan& p, ImageSize full, ImageSize scaled, int size, Interpolation filter) {
  // The plan is in full-resolution coordinates; the decode may be a 1/d downscale of it.
  const double x0 = static_cast<double>(p.left) * scaled.width / full.width;
  const double x1 = static_cast<double>(p.left + p.width) * scaled.width / full.width;
  const double y0 = static_cast<double>(p.top) * scaled.height / full.height;
  const double y1 = static_cast<double>(p.top + p.height) * scaled.height / full.height;
  // Taps stay inside the crop, as in torchvision's crop-then-resize.
  const int lo_x = static_cast<int>(std::floor(x0)), hi_x = std::min(static_cast<int>(std::ceil(x1)), scaled.width);
  const int lo_y = static_cast<int>(std::floor(y0)), hi_y = std::min(static_cast<int>(std::ceil(y1)), scaled.height);
  Taps h = filter_taps(filter, x0, x1, lo_x, hi_x, p.out_width, p.window_left, size);
  pad_taps(h, scaled.width);
  return {std::move(h), filter_taps(filter, y0, y1, lo_y, hi_y, p.out_height, p.window_top, size)};
}

// RandomErasing.get_params with scale (0.02, 0.33), ratio (0.3, 3.3): ten tries at an area and
// a log-uniform aspect ratio that fit inside the size x size output; none when all ten miss.
std::optional<EraseBox> erase_box(int size, SampleRng& rng) {
  const double area = static_cast<double>(size) * size;
  const double log_lo = std::log(0.3), log_hi = std::log(3.3);
  for (int attempt = 0; attempt < 10; ++attempt) {
    const double erase_area = area * rng.uniform(0.02, 0.33);
    const double aspect = std::exp(rng.uniform(log_lo, log_hi));
    const int h = static_cast<int>(std::nearbyint(std::sqrt(erase_area * aspect)));
    const int w = static_cast<int>(std::nearbyint(std::sqrt(erase_area / aspect)));
    if (!(h < size && w < size)) continue;
    EraseBox box;
    box.height = h;
    box.width = w;
    box.top = static_cast<int>(rng.integer(0, size - h));
    box.left = static_cast<int>(rng.integer(0, size - w));
    return box;
  }
  return std::nullopt;
}

void erase(const EraseBox& box, int size, float* out) {
  for (int c = 0; c < 3; ++c) {
    for (int y = box.top; y < box.top + box.height; ++y) {
      float* row = out + (static_cast<size_t>(c) * size + y) * size + box.left;
      std::fill(row, row + box.width, 0.0f);
    }
  }
}

// Streams apart from the crop's, so that turning erasing or augmentation on leaves every crop
// as it was.
constexpr uint64_t kEraseStream = 0x6572617365;        // "erase"
constexpr uint64_t kAugmentStream = 0x6175676d656e74;  // "augment"

}  // namespace

Transform::Transform(TransformOptions options) : options_(std::move(options)) {
  const auto& o = options_;
  if (o.mode() == TransformMode::Train && o.auto_augment()) augment_.emplace(*o.auto_augment());
  DPT_CHECK(o.size() > 0, ConfigError, "transform: output size must be positive, got ", o.size());
  DPT_CHECK(o.mode() == TransformMode::Train || o.resize() >= o.size(), ConfigError, "transform: eval resize ",
            o.resize(), " must be at least the crop size ", o.size());
  DPT_CHECK(o.scale_min() > 0 && o.scale_min() <= o.scale_max(), ConfigError, "transform: bad crop scale range [",
            o.scale_min(), ", ", o.scale_max(), "]");
  DPT_CHECK(o.erase_probability() >= 0 && o.erase_probability() <= 1, ConfigError,
            "transform: random erasing probability must lie in [0, 1], got ", o.erase_probability());
  DPT_CHECK(o.ratio_min() > 0 && o.ratio_min() <= o.ratio_max(), ConfigError,
            "transform: bad crop aspect ratio range [", o.ratio_min(), ", ", o.ratio_max(), "]");
  for (int c = 0; c < 3; ++c) {
    DPT_CHECK(o.std()[c] != 0.0f, ConfigError, "transform: normalization std of channel ", c, " is zero");
  }
}

std::vector<int64_t> Transform::sample_shape() const { return {3, options_.size(), options_.size()}; }

int64_t Transform::sample_numel() const { return 3 * static_cast<int64_t>(options_.size()) * options_.size(); }

CropPlan Transform::plan(int width, int height, int64_t epoch, int64_t index) const {
  const auto& o = options_;
  CropPlan p;
  if (o.mode() == TransformMode::Eval) {
    // Resize(resize): the shorter side becomes `resize`, the longer one is truncated like torchvision.
    const bool wide = width > height;
    const int shorter = wide ? height : width, longer = wide ? width : height;
    const int new_long = static_cast<int>(static_cast<double>(o.resize()) * longer / shorter);
    p.width = width;
    p.height = height;
    p.out_width = wide ? new_long : o.resize();
    p.out_height = wide ? o.resize() : new_long;
    // CenterCrop(size): Python's round(), which rounds halves to even, as nearbyint does.
    p.window_left = static_cast<int>(std::nearbyint((p.out_width - o.size()) / 2.0));
    p.window_top = static_cast<int>(std::nearbyint((p.out_height - o.size()) / 2.0));
    return p;
  }
  // RandomResizedCrop.get_params: ten tries at a random area and log-uniform aspect ratio, then a
  // center crop clamped to the ratio range.
  SampleRng rng(o.seed(), epoch, index);
  const double area = static_cast<double>(width) * height;
  const double log_lo = std::log(o.ratio_min()), log_hi = std::log(o.ratio_max());
  bool found = false;
  for (int attempt = 0; attempt < 10 && !found; ++attempt) {
    const double target_area = area * rng.uniform(o.scale_min(), o.scale_max());
    const double aspect = std::exp(rng.uniform(log_lo, log_hi));
    const int w = static_cast<int>(std::nearbyint(std::sqrt(target_area * aspect)));
    const int h = static_cast<int>(std::nearbyint(std::sqrt(target_area / aspect)));
    if (w > 0 && w <= width && h > 0 && h <= height) {
      p.top = static_cast<int>(rng.integer(0, height - h));
      p.left = static_cast<int>(rng.integer(0, width - w));
      p.width = w;
      p.height = h;
      found = true;
    }
  }
  if (!found) {
    const double in_ratio = static_cast<double>(width) / height;
    p.width = width;
    p.height = height;
    if (in_ratio < o.ratio_min()) {
      p.height = static_cast<int>(std::nearbyint(width / o.ratio_min()));
    } else if (in_ratio > o.ratio_max()) {
      p.width = static_cast<int>(std::nearbyint(height * o.ratio_max()));
    }
    p.top = (height - p.height) / 2;
    p.left = (width - p.width) / 2;
  }
  p.out_width = p.out_height = o.size();
  p.flip = rng.uniform(0.0, 1.0) < o.flip_probability();
  if (augment_) p.augment.emplace(o.seed() ^ kAugmentStream, epoch, index);
  if (o.erase_probability() > 0) {
    SampleRng erase_rng(o.seed() ^ kEraseStream, epoch, index);
    if (erase_rng.uniform(0.0, 1.0) < o.erase_probability()) p.erase = erase_box(o.size(), erase_rng);
  }
  return p;
}

void Transform::run_plan(const Image& image, int left, int top, const Taps& h, const Taps& v, const CropPlan& plan,
                         float* out) const {
  const auto& o = options_;
  if (augment_ && plan.augment) {
    // PIL's order: the augmentation sees the resized, flipped bytes; normalization comes after.
    thread_local Image crop;
    resample_to_image(image, left, top, h, v, plan.flip, crop);
    SampleRng rng = *plan.augment;
    augment_->apply(crop, rng);
    normalize_image(crop, o.mean(), o.std(), out);
  } else {
    resample(image, left, top, h, v, plan.flip, o.mean(), o.std(), out);
  }
  if (plan.erase) erase(*plan.erase, o.size(), out);
}

void Transform::apply(const Image& image, const CropPlan& plan, float* out) const {
  const ImageSize size{image.width, image.height};
  const auto [h, v] = plan_taps(plan, size, size, options_.size(), options_.interpolation());
  run_plan(image, 0, 0, h, v, plan, out);
}

void Transform::apply(const Image& image, int64_t epoch, int64_t index, float* out) const {
  apply(image, plan(image.width, image.height, epoch, index), out);
}

void Transform::apply_encoded(const std::vector<uint8_t>& bytes, const std::string& name, int64_t epoch, int64_t index,
                              float* out) const {
  const ImageSize full = read_image_size(bytes, name);
  const CropPlan p = plan(full.width, full.height, epoch, index);
  int denominator = 1;
  if (options_.dct_scaling() && sniff_format(bytes) == ImageFormat::Jpeg) {
    // Keep at least out_width pixels across the crop: the full width scaled by out / crop.
    const ImageSize at_least{static_cast<int>(std::ceil(static_cast<double>(full.width) * p.out_width / p.width)),
                             static_cast<int>(std::ceil(static_cast<double>(full.height) * p.out_height / p.height))};
    denominator = jpeg_scale_denominator(full, at_least);
  }
  const auto [h, v] = plan_taps(p, full, scaled_size(full, denominator), options_.size(), options_.interpolation());
  // Decode only the pixels the filter taps read.
  const int left = h.start.front(), top = v.start.front();
  int right = 0, bottom = 0;
  for (size_t i = 0; i < h.start.size(); ++i) right = std::max(right, h.start[i] + h.length[i]);
  for (size_t i = 0; i < v.start.size(); ++i) bottom = std::max(bottom, v.start[i] + v.length[i]);
  thread_local ImageRegion region;
  decode_region(bytes, name, denominator, {left, top, right - left, bottom - top}, region);
  run_plan(region.image, region.left, region.top, h, v, p, out);
}

}  // namespace dpt::data
