#include "dptrain/data/augment_ops.h"

#include <algorithm>
#include <array>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <iterator>

#include "dptrain/common/error.h"

namespace dpt::data {

namespace {

constexpr std::array<const char*, 15> kNames = {
    "Identity",   "ShearX",   "ShearY",  "TranslateX",   "TranslateY", "Rotate",   "Brightness", "Color",
    "Contrast", "Sharpness", "Posterize", "Solarize", "AutoContrast", "Equalize", "Invert"};

// CPython's math.radians and math.degrees: one multiplication by a rounded constant, so that
// degrees -> radians round trips land on the same doubles as torchvision's.
constexpr double kDegToRad = M_PI / 180.0;
constexpr double kRadToDeg = 180.0 / M_PI;

using AffineMatrix = std::array<double, 6>;

// ---- Geometry: Pillow's Image.transform(AFFINE) with its bilinear and bicubic filters ----------

// Pillow's FLOOR and XCLIP/YCLIP.
int floor_int(double v) { return v < 0.0 ? static_cast<int>(std::floor(v)) : static_cast<int>(v); }
int clip_index(int v, int size) { return v < 0 ? 0 : v < size ? v : size - 1; }

// bilinear_filter32RGB: rows y and y + 1 (the first clamped into the image, the second replaced
// by the first when outside it), truncated to a byte.
void sample_bilinear(const Image& in, double xin, double yin, uint8_t* out) {
  xin -= 0.5;
  yin -= 0.5;
  const int x = floor_int(xin), y = floor_int(yin);
  const double dx = xin - x, dy = yin - y;
  const int x0 = clip_index(x, in.width) * 3, x1 = clip_index(x + 1, in.width) * 3;
  const uint8_t* top = in.row(clip_index(y, in.height));
  const bool has_next = y + 1 >= 0 && y + 1 < in.height;
  const uint8_t* next = has_next ? in.row(y + 1) : nullptr;
  for (int b = 0; b < 3; ++b) {
    const double v1 = top[x0 + b] + (top[x1 + b] - top[x0 + b]) * dx;
    const double v2 = has_next ? next[x0 + b] + (next[x1 + b] - next[x0 + b]) * dx : v1;
    out[b] = static_cast<uint8_t>(v1 + (v2 - v1) * dy);
  }
}

// Pillow's BICUBIC macro (its own cubic, not the resize filter's), in its order of operations.
double cubic(double v1, double v2, double v3, double v4, double d) {
  const double p1 = v2;
  const double p2 = -v1 + v3;
  const double p3 = 2 * (v1 - v2) + v3 - v4;
  const double p4 = -v1 + v2 - v3 + v4;
  return p1 + d * (p2 + d * (p3 + d * p4));
}

// bicubic_filter32RGB: four rows from y - 1, each missing one below the image replaced by the
// one above it, clamped and truncated to a byte.
void sample_bicubic(const Image& in, double xin, double yin, uint8_t* out) {
  xin -= 0.5;
  yin -= 0.5;
  const int x = floor_int(xin) - 1, y = floor_int(yin) - 1;
  const double dx = xin - (x + 1), dy = yin - (y + 1);
  std::array<int, 4> xs;
  for (int i = 0; i < 4; ++i) xs[i] = clip_index(x + i, in.width) * 3;
  for (int b = 0; b < 3; ++b) {
    std::array<double, 4> v;
    for (int r = 0; r < 4; ++r) {
      const bool inside = r == 0 || (y + r >= 0 && y + r < in.height);
      if (!inside) {
        v[r] = v[r - 1];
        continue;
      }
      const uint8_t* row = in.row(r == 0 ? clip_index(y, in.height) : y + r);
      v[r] = cubic(row[xs[0] + b], row[xs[1] + b], row[xs[2] + b], row[xs[3] + b], dx);
    }
    const double value = cubic(v[0], v[1], v[2], v[3], dy);
    out[b] = value <= 0.0 ? 0 : value >= 255.0 ? 255 : static_cast<uint8_t>(value);
  }
}

// ImagingGenericTransform with affine_transform: output pixel (x, y) samples the input at
// m * (x + 0.5, y + 0.5, 1); samples whose point lies outside the input stay black.
void affine_transform(const Image& in, const AffineMatrix& m, Interpolation filter, Image& out) {
  out.width = in.width;
  out.height = in.height;
  out.pixels.assign(in.pixels.size(), 0);
  for (int y = 0; y < out.height; ++y) {
    uint8_t* dst = out.row(y);
    const double yc = y + 0.5;
    for (int x = 0; x < out.width; ++x) {
      const double xc = x + 0.5;
      const double xin = m[0] * xc + m[1] * yc + m[2];
      const double yin = m[3] * xc + m[4] * yc + m[5];
      if (xin < 0.0 || xin >= in.width || yin < 0.0 || yin >= in.height) continue;
      if (filter == Interpolation::Bicubic) {
        sample_bicubic(in, xin, yin, dst + x * 3);
      } else {
        sample_bilinear(in, xin, yin, dst + x * 3);
      }
    }
  }
}

// torchvision's _get_inverse_affine_matrix with scale 1: rotation, then shear, about `center`,
// then the translation, inverted (output -> input), in torchvision's order of operations.
AffineMatrix inverse_affine_matrix(double cx, double cy, double angle, double tx, double ty, double shear_x,
                                   double shear_y) {
  const double rot = angle * kDegToRad, sx = shear_x * kDegToRad, sy = shear_y * kDegToRad;
  const double a = std::cos(rot - sy) / std::cos(sy);
  const double b = -std::cos(rot - sy) * std::tan(sx) / std::cos(sy) - std::sin(rot);
  const double c = std::sin(rot - sy) / std::cos(sy);
  const double d = -std::sin(rot - sy) * std::tan(sx) / std::cos(sy) + std::cos(rot);
  AffineMatrix m = {d, -b, 0.0, -c, a, 0.0};
  m[2] += m[0] * (-cx - tx) + m[1] * (-cy - ty);
  m[5] += m[3] * (-cx - tx) + m[4] * (-cy - ty);
  m[2] += cx;
  m[5] += cy;
  return m;
}

// Python's round(v, 15): correctly rounded to 15 decimals, as glibc's printf rounds.
double round15(double v) {
  char text[64];
  std::snprintf(text, sizeof text, "%.15f", v);
  return std::strtod(text, nullptr);
}

// Image.transpose(ROTATE_90 / 180 / 270): counterclockwise quarter turns (90 and 270 of square
// images only, where the size stays).
void rotate_quarter_turns(const Image& in, int turns, Image& out) {
  const int w = in.width, h = in.height;
  out = in;
  for (int y = 0; y < h; ++y) {
    for (int x = 0; x < w; ++x) {
      int oy = h - 1 - y, ox = w - 1 - x;  // half a turn
      if (turns == 1) {
        oy = w - 1 - x;
        ox = y;
      } else if (turns == 3) {
        oy = x;
        ox = h - 1 - y;
      }
      std::copy_n(in.row(y) + x * 3, 3, out.row(oy) + ox * 3);
    }
  }
}

// Image.rotate(angle, resample, expand=False): Pillow's transpose fast paths for whole and
// (on square images) quarter turns, else its own matrix, rounded to 15 decimals, about the centre.
void rotate(const Image& in, double angle, Interpolation filter, Image& out) {
  angle = std::fmod(angle, 360.0);
  if (angle < 0) angle += 360.0;  // Python's %: the sign of the divisor
  if (angle == 0) {
    out = in;
    return;
  }
  if (angle == 180 || ((angle == 90 || angle == 270) && in.width == in.height)) {
    rotate_quarter_turns(in, static_cast<int>(angle) / 90, out);
    return;
  }
  const double cx = in.width / 2.0, cy = in.height / 2.0;
  const double radians = -(angle * kDegToRad);
  AffineMatrix m = {round15(std::cos(radians)), round15(std::sin(radians)), 0.0,
                    round15(-std::sin(radians)), round15(std::cos(radians)), 0.0};
  m[2] = m[0] * -cx + m[1] * -cy + m[2];
  m[5] = m[3] * -cx + m[4] * -cy + m[5];
  m[2] += cx;
  m[5] += cy;
  affine_transform(in, m, filter, out);
}

// ---- Colour: ImageEnhance's blends and ImageOps' lookup tables --------------------------------

// Image.blend(degenerate, image, alpha): float arithmetic, truncated; clamped only when alpha
// extrapolates (outside [0, 1]), as Pillow does.
void blend(const Image& degenerate, float alpha, Image& image) {
  const bool interpolates = alpha >= 0 && alpha <= 1.0f;
  for (size_t i = 0; i < image.pixels.size(); ++i) {
    const int from = degenerate.pixels[i];
    const float v = static_cast<float>(from) + alpha * static_cast<float>(image.pixels[i] - from);
    if (interpolates) {
      image.pixels[i] = static_cast<uint8_t>(v);
    } else {
      image.pixels[i] = v <= 0.0f ? 0 : v >= 255.0f ? 255 : static_cast<uint8_t>(v);
    }
  }
}

// Pillow's RGB -> L (ITU-R 601-2 luma in 16-bit fixed point).
uint8_t luma(const uint8_t* rgb) {
  return static_cast<uint8_t>((rgb[0] * 19595 + rgb[1] * 38470 + rgb[2] * 7471 + 0x8000) >> 16);
}

// The degenerate images of ImageEnhance's Color, Contrast and Sharpness.
void grayscale(const Image& in, Image& out) {
  out = in;
  for (size_t i = 0; i < in.pixels.size(); i += 3) std::fill_n(&out.pixels[i], 3, luma(&in.pixels[i]));
}

void mean_gray(const Image& in, Image& out) {
  uint64_t total = 0;
  for (size_t i = 0; i < in.pixels.size(); i += 3) total += luma(&in.pixels[i]);
  const double mean = static_cast<double>(total) / static_cast<double>(in.pixels.size() / 3);
  out = in;
  std::fill(out.pixels.begin(), out.pixels.end(), static_cast<uint8_t>(static_cast<int>(mean + 0.5)));
}

// ImageFilter.SMOOTH (3x3, 1 1 1 / 1 5 1 / 1 1 1, divided by 13 in float): float sums with 0.5
// added for rounding, truncated; the border rows and columns are copied.
void smooth(const Image& in, Image& out) {
  out = in;
  if (in.width < 3 || in.height < 3) return;
  const float k = 1.0f / 13.0f, centre = 5.0f / 13.0f;
  auto row_sum = [](const uint8_t* p, float left, float middle, float right) {
    return static_cast<float>(p[-3]) * left + static_cast<float>(p[0]) * middle + static_cast<float>(p[3]) * right;
  };
  for (int y = 1; y < in.height - 1; ++y) {
    const uint8_t *above = in.row(y - 1), *here = in.row(y), *below = in.row(y + 1);
    uint8_t* dst = out.row(y);
    for (int i = 3; i < (in.width - 1) * 3; ++i) {
      float s = 0.5f;
      s += row_sum(below + i, k, k, k);
      s += row_sum(here + i, k, centre, k);
      s += row_sum(above + i, k, k, k);
      dst[i] = s <= 0.0f ? 0 : s >= 255.0f ? 255 : static_cast<uint8_t>(s);
    }
  }
}

using Lut = std::array<uint8_t, 256>;

void apply_luts(const std::array<Lut, 3>& luts, Image& image) {
  for (size_t i = 0; i < image.pixels.size(); ++i) image.pixels[i] = luts[i % 3][image.pixels[i]];
}

void apply_lut(const Lut& lut, Image& image) { apply_luts({lut, lut, lut}, image); }

Lut identity_lut() {
  Lut lut;
  for (int i = 0; i < 256; ++i) lut[i] = static_cast<uint8_t>(i);
  return lut;
}

std::array<std::array<int64_t, 256>, 3> histograms(const Image& image) {
  std::array<std::array<int64_t, 256>, 3> h{};
  for (size_t i = 0; i < image.pixels.size(); ++i) ++h[i % 3][image.pixels[i]];
  return h;
}

// ImageOps.autocontrast(cutoff=0): each band stretched from its lowest to its highest value.
void autocontrast(Image& image) {
  const auto h = histograms(image);
  std::array<Lut, 3> luts;
  for (int b = 0; b < 3; ++b) {
    int lo = 0, hi = 255;
    while (lo < 255 && h[b][lo] == 0) ++lo;
    while (hi > 0 && h[b][hi] == 0) --hi;
    luts[b] = identity_lut();
    if (hi <= lo) continue;
    const double scale = 255.0 / (hi - lo);
    const double offset = -lo * scale;
    for (int i = 0; i < 256; ++i) {
      luts[b][i] = static_cast<uint8_t>(std::clamp(static_cast<int>(i * scale + offset), 0, 255));
    }
  }
  apply_luts(luts, image);
}

// ImageOps.equalize: each band mapped through its cumulative histogram in integer steps.
void equalize(Image& image) {
  const auto h = histograms(image);
  std::array<Lut, 3> luts;
  for (int b = 0; b < 3; ++b) {
    luts[b] = identity_lut();
    int64_t total = 0, last = 0, used = 0;
    for (int i = 0; i < 256; ++i) {
      if (h[b][i] == 0) continue;
      total += h[b][i];
      last = h[b][i];
      ++used;
    }
    if (used <= 1) continue;
    const int64_t step = (total - last) / 255;
    if (step == 0) continue;
    int64_t n = step / 2;
    for (int i = 0; i < 256; ++i) {
      // Image.point clamps the table's entries to bytes; the last ones can reach 256.
      luts[b][i] = static_cast<uint8_t>(std::min<int64_t>(n / step, 255));
      n += h[b][i];
    }
  }
  apply_luts(luts, image);
}

void posterize(Image& image, int bits) {
  const int mask = ~((1 << (8 - bits)) - 1) & 0xff;
  Lut lut;
  for (int i = 0; i < 256; ++i) lut[i] = static_cast<uint8_t>(i & mask);
  apply_lut(lut, image);
}

void solarize(Image& image, double threshold) {
  Lut lut;
  for (int i = 0; i < 256; ++i) lut[i] = static_cast<uint8_t>(i < threshold ? i : 255 - i);
  apply_lut(lut, image);
}

void invert(Image& image) {
  for (auto& v : image.pixels) v = static_cast<uint8_t>(255 - v);
}

}  // namespace

const char* to_string(AugmentOp op) { return kNames[static_cast<size_t>(op)]; }

AugmentOp parse_augment_op(const std::string& name) {
  for (size_t i = 0; i < kNames.size(); ++i) {
    if (name == kNames[i]) return static_cast<AugmentOp>(i);
  }
  throw ConfigError(str("unknown augmentation op '", name, "'"));
}

void apply_augment_op(Image& image, AugmentOp op, double magnitude, Interpolation interpolation) {
  // One scratch image per loader thread: a fresh 150 KB buffer per op would cost page faults.
  thread_local Image scratch;
  const double cx = image.width * 0.5, cy = image.height * 0.5;
  const float factor = static_cast<float>(1.0 + magnitude);
  switch (op) {
    case AugmentOp::Identity:
      return;
    case AugmentOp::ShearX:
      affine_transform(image, inverse_affine_matrix(0, 0, 0, 0, 0, std::atan(magnitude) * kRadToDeg, 0), interpolation,
                       scratch);
      break;
    case AugmentOp::ShearY:
      affine_transform(image, inverse_affine_matrix(0, 0, 0, 0, 0, 0, std::atan(magnitude) * kRadToDeg), interpolation,
                       scratch);
      break;
    case AugmentOp::TranslateX:
      affine_transform(image, inverse_affine_matrix(cx, cy, 0, std::trunc(magnitude), 0, 0, 0), interpolation, scratch);
      break;
    case AugmentOp::TranslateY:
      affine_transform(image, inverse_affine_matrix(cx, cy, 0, 0, std::trunc(magnitude), 0, 0), interpolation, scratch);
      break;
    case AugmentOp::Rotate:
      rotate(image, magnitude, interpolation, scratch);
      break;
    case AugmentOp::Brightness:
      scratch = image;
      std::fill(scratch.pixels.begin(), scratch.pixels.end(), 0);
      blend(scratch, factor, image);
      return;
    case AugmentOp::Color:
      grayscale(image, scratch);
      blend(scratch, factor, image);
      return;
    case AugmentOp::Contrast:
      mean_gray(image, scratch);
      blend(scratch, factor, image);
      return;
    case AugmentOp::Sharpness:
      smooth(image, scratch);
      blend(scratch, factor, image);
      return;
    case AugmentOp::Posterize:
      DPT_CHECK(magnitude >= 0 && magnitude < 9, ConfigError, "Posterize keeps 0 to 8 bits, got ", magnitude);
      posterize(image, static_cast<int>(magnitude));
      return;
    case AugmentOp::Solarize:
      solarize(image, magnitude);
      return;
    case AugmentOp::AutoContrast:
      autocontrast(image);
      return;
    case AugmentOp::Equalize:
      equalize(image);
      return;
    case AugmentOp::Invert:
      invert(image);
      return;
  }
  std::swap(image, scratch);
}

}  // namespace dpt::data
