#include "dptrain/data/synthetic.h"

#include <algorithm>
#include <cmath>

#include "dptrain/common/error.h"
#include "dptrain/data/random.h"

namespace dpt::data {

namespace {

constexpr int kShapes = 7;
// Separates the rendering stream from the augmentation streams, which use epochs >= 0.
constexpr int64_t kRenderStream = -1;

bool inside(int shape, double dx, double dy) {
  const double ax = std::abs(dx), ay = std::abs(dy);
  switch (shape) {
    case 0:
      return dx * dx + dy * dy < 1.0;  // disc
    case 1:
      return std::max(ax, ay) < 0.8;  // square
    case 2:
      return dy > -0.9 && dy < 0.8 && ax < (dy + 0.9) * 0.55;  // triangle
    case 3: {
      const double d = dx * dx + dy * dy;
      return d < 1.0 && d > 0.4;
    }  // ring
    case 4:
      return std::max(ax, ay) < 0.95 && std::min(ax, ay) < 0.3;  // cross
    case 5:
      return ax + ay < 1.0;  // diamond
    default:
      return std::max(ax, ay) < 0.85 && static_cast<int>((dy + 1.0) * 3.0) % 2 == 0;  // stripes
  }
}

// HSV with full saturation and value scaled by `value`, to bytes.
void hue_to_rgb(double hue, double value, uint8_t rgb[3]) {
  const double h = (hue - std::floor(hue)) * 6.0;
  const int sector = static_cast<int>(h) % 6;
  const double f = h - std::floor(h);
  double r = 0, g = 0, b = 0;
  switch (sector) {
    case 0:
      r = 1, g = f, b = 0;
      break;
    case 1:
      r = 1 - f, g = 1, b = 0;
      break;
    case 2:
      r = 0, g = 1, b = f;
      break;
    case 3:
      r = 0, g = 1 - f, b = 1;
      break;
    case 4:
      r = f, g = 0, b = 1;
      break;
    default:
      r = 1, g = 0, b = 1 - f;
      break;
  }
  rgb[0] = static_cast<uint8_t>(std::lround(40 + 200 * r * value));
  rgb[1] = static_cast<uint8_t>(std::lround(40 + 200 * g * value));
  rgb[2] = static_cast<uint8_t>(std::lround(40 + 200 * b * value));
}

}  // namespace

SyntheticDataset::SyntheticDataset(SyntheticOptions options, Transform transform)
    : options_(options), transform_(std::move(transform)) {
  DPT_CHECK(options.size() >= 0, ConfigError, "synthetic dataset: size must not be negative, got ", options.size());
  DPT_CHECK(options.num_classes() > 0, ConfigError, "synthetic dataset: num_classes must be positive, got ",
            options.num_classes());
  DPT_CHECK(options.image_size() >= 8, ConfigError, "synthetic dataset: image_size must be at least 8, got ",
            options.image_size());
}

Image SyntheticDataset::render(int64_t index) const {
  check_index(index);
  const int64_t cls = label(index);
  const int s = options_.image_size();
  SampleRng rng(options_.seed(), kRenderStream, index);
  const double cx = rng.uniform(0.3, 0.7) * s, cy = rng.uniform(0.3, 0.7) * s;
  const double radius = rng.uniform(0.22, 0.4) * s;
  const double tilt = rng.uniform(-0.25, 0.25);  // small rotation, in radians
  uint8_t fg[3];
  hue_to_rgb(static_cast<double>(cls) / options_.num_classes() + rng.uniform(-0.02, 0.02), rng.uniform(0.75, 1.0), fg);
  const int bg = static_cast<int>(rng.integer(20, 110));
  const int noise = static_cast<int>(rng.integer(8, 30));
  const int shape = static_cast<int>(cls % kShapes);
  const double cos_t = std::cos(tilt), sin_t = std::sin(tilt);

  Image image;
  image.width = image.height = s;
  image.pixels.resize(static_cast<size_t>(s) * s * 3);
  uint64_t grain = rng.next();
  for (int y = 0; y < s; ++y) {
    uint8_t* row = image.row(y);
    for (int x = 0; x < s; ++x) {
      const double px = (x + 0.5 - cx) / radius, py = (y + 0.5 - cy) / radius;
      const bool on = inside(shape, cos_t * px + sin_t * py, -sin_t * px + cos_t * py);
      for (int c = 0; c < 3; ++c) {
        grain = grain * 6364136223846793005ull + 1442695040888963407ull;  // cheap per-pixel noise
        const int jitter = static_cast<int>((grain >> 33) % (2 * noise + 1)) - noise;
        const int base = on ? fg[c] : bg + (c == 2 ? y * 40 / s : 0);  // a faint vertical gradient
        row[3 * x + c] = static_cast<uint8_t>(std::clamp(base + jitter, 0, 255));
      }
    }
  }
  return image;
}

int64_t SyntheticDataset::get(int64_t index, int64_t epoch, float* out) const {
  transform_.apply(render(index), epoch, index, out);
  return label(index);
}

std::string SyntheticDataset::describe(int64_t index) const {
  return str("synthetic sample ", index, " (seed ", options_.seed(), ")");
}

}  // namespace dpt::data
