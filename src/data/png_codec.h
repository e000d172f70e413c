#pragma once
// libpng's side of image.h: a PNG's size from its header, and its pixels as torchvision's
// ImageFolder sees them, PIL's Image.open(...).convert("RGB"). Private to the data layer.

#include <cstdint>
#include <string>
#include <vector>

#include "dptrain/data/image.h"

namespace dpt::data {

// Width and height from the IHDR chunk; DataError naming `name` when there is none.
ImageSize png_size(const std::vector<uint8_t>& bytes, const std::string& name);

// Every pixel, as PIL converts each kind of PNG to RGB: an alpha channel and tRNS transparency
// are dropped, not composited (the stored colours stay); no gamma or colour profile is applied;
// grey and palette pictures of fewer bits are widened to 8; 16-bit samples keep their high byte,
// except 16-bit grey without alpha, which PIL reads as integers ("I;16") and clips at 255.
// DataError naming `name`, with libpng's reason, on bad data.
Image decode_png(const std::vector<uint8_t>& bytes, const std::string& name);

}  // namespace dpt::data
