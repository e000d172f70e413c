#pragma once
// Small deterministic RGB pictures for codec and transform tests: smooth gradients with a few
// edges, so that JPEG round trips and resizes have something to do.

#include <cmath>

#include "dptrain/data/image.h"

namespace dpt::testing {

inline data::Image gradient_image(int width, int height, int variant = 0) {
  data::Image im;
  im.width = width;
  im.height = height;
  im.pixels.resize(static_cast<size_t>(width) * height * 3);
  for (int y = 0; y < height; ++y) {
    for (int x = 0; x < width; ++x) {
      uint8_t* p = im.row(y) + 3 * x;
      const bool box = std::abs(x - width / 3) < width / 6 && std::abs(y - height / 2) < height / 5;
      p[0] = static_cast<uint8_t>((x * 255) / width);
      p[1] = static_cast<uint8_t>(box ? 230 - 20 * variant : (y * 200) / height);
      p[2] = static_cast<uint8_t>(127 + 100 * std::sin(0.15 * (x + y) + variant));
    }
  }
  return im;
}

// How many samples of `rect` differ between a region decode (`part`, which may cover more
// columns) and the whole picture decoded at the same scale: 0 when the region decode is exact.
inline int samples_differing(const data::ImageRegion& part, const data::Image& whole, const data::PixelRect& rect) {
  int differing = 0;
  for (int y = 0; y < rect.height; ++y) {
    for (int x = rect.left; x < rect.left + rect.width; ++x) {
      for (int c = 0; c < 3; ++c) {
        differing += part.image.row(y)[3 * (x - part.left) + c] != whole.row(y + rect.top)[3 * x + c];
      }
    }
  }
  return differing;
}

}  // namespace dpt::testing
