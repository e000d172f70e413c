#include "png_codec.h"

#include <png.h>

#include <algorithm>
#include <csetjmp>
#include <cstdio>
#include <cstring>

#include "dptrain/common/error.h"

namespace dpt::data {
namespace {

// What libpng's callbacks share: the bytes being read, and the reason of a failure.
struct PngSource {
  const uint8_t* data = nullptr;
  size_t size = 0;
  size_t offset = 0;
  char message[200] = "";
};

void read_from_memory(png_structp png, png_bytep out, size_t length) {
  auto* source = static_cast<PngSource*>(png_get_io_ptr(png));
  if (length > source->size - source->offset) png_error(png, "the data ends early");
  std::memcpy(out, source->data + source->offset, length);
  source->offset += length;
}

// libpng's error callback must not return: it jumps back to read_png's setjmp.
[[noreturn]] void png_fail(png_structp png, png_const_charp message) {
  auto* source = static_cast<PngSource*>(png_get_error_ptr(png));
  std::snprintf(source->message, sizeof source->message, "%s", message);
  png_longjmp(png, 1);
}

// Warnings are about ancillary chunks (a colour profile, a bad CRC in a text chunk) that PIL
// passes over as well; the pixels are unaffected.
void png_warn(png_structp, png_const_charp) {}

// 16-bit grey samples, big-endian, at the front of `row`, widened in place to RGB bytes clipped
// at 255 (PIL's "I;16" to "L" conversion). From the right, so no sample is overwritten unread.
void clip_grey16_to_rgb(uint8_t* row, int width) {
  for (int x = width - 1; x >= 0; --x) {
    const int value = (row[2 * x] << 8) | row[2 * x + 1];
    const uint8_t clipped = static_cast<uint8_t>(std::min(value, 255));
    row[3 * x] = row[3 * x + 1] = row[3 * x + 2] = clipped;
  }
}

// libpng's read and info structs, destroyed in the frame that owns them: read_png's setjmp frame
// may hold nothing with a destructor, and a C++ exception (out of memory in the pixels' resize)
// unwinds through it to here.
class PngReader {
 public:
  explicit PngReader(PngSource& source)
      : png_(png_create_read_struct(PNG_LIBPNG_VER_STRING, &source, png_fail, png_warn)),
        info_(png_ ? png_create_info_struct(png_) : nullptr) {}
  ~PngReader() { png_destroy_read_struct(&png_, &info_, nullptr); }
  PngReader(const PngReader&) = delete;
  PngReader& operator=(const PngReader&) = delete;

  png_structp png() const { return png_; }
  png_infop info() const { return info_; }

 private:
  png_structp png_;
  png_infop info_;
};

// Decodes `source` into `image` (width * 3 bytes a row). False with libpng's reason in
// source.message; a DataError naming `name` for a size beyond the limits. Nothing with a destructor
// lives in this frame after setjmp, as libpng's longjmp requires; `reader` and `image` live in the
// caller's.
bool read_png(const PngReader& reader, PngSource& source, Image& image, const std::string& name) {
  png_structp png = reader.png();
  png_infop info = reader.info();
  if (info == nullptr) {
    std::snprintf(source.message, sizeof source.message, "out of memory");
    return false;
  }
  if (setjmp(png_jmpbuf(png))) return false;
  png_set_read_fn(png, &source, read_from_memory);
  png_read_info(png, info);
  const int width = static_cast<int>(png_get_image_width(png, info));
  const int height = static_cast<int>(png_get_image_height(png, info));
  const int depth = png_get_bit_depth(png, info);
  const int colour = png_get_color_type(png, info);
  // decode_region does not ask read_image_size first: refuse a bomb before its pixels are allocated.
  // Thrown, not longjmp'd: the data did not fail libpng, and an exception may leave this frame.
  DPT_CHECK(within_decode_limits({width, height}), DataError, "cannot decode PNG ", name, ": it ",
            beyond_decode_limits({width, height}));
  const bool clipped_grey16 = colour == PNG_COLOR_TYPE_GRAY && depth == 16;
  if (colour == PNG_COLOR_TYPE_PALETTE) png_set_palette_to_rgb(png);  // tRNS becomes alpha, stripped below
  if (colour == PNG_COLOR_TYPE_GRAY && depth < 8) png_set_expand_gray_1_2_4_to_8(png);
  if (depth == 16 && !clipped_grey16) png_set_strip_16(png);
  png_set_strip_alpha(png);
  if ((colour & PNG_COLOR_MASK_COLOR) == 0 && !clipped_grey16) png_set_gray_to_rgb(png);
  const int passes = png_set_interlace_handling(png);  // Adam7: every pass refines the same rows
  png_read_update_info(png, info);
  const size_t row_bytes = static_cast<size_t>(width) * (clipped_grey16 ? 2 : 3);
  if (png_get_rowbytes(png, info) != row_bytes) png_error(png, "unexpected row layout after conversion to RGB");
  image.width = width;
  image.height = height;
  image.pixels.resize(static_cast<size_t>(width) * height * 3);
  for (int pass = 0; pass < passes; ++pass) {
    for (int y = 0; y < height; ++y) png_read_row(png, image.row(y), nullptr);
  }
  if (clipped_grey16) {
    for (int y = 0; y < height; ++y) clip_grey16_to_rgb(image.row(y), width);
  }
  // The chunks after the pixels are not read: PIL stops at the image data too.
  return true;
}

}  // namespace

std::vector<uint8_t> encode_png(const Image& image) {
  const size_t pixels = static_cast<size_t>(image.width) * static_cast<size_t>(image.height) * 3;
  DPT_CHECK(image.width > 0 && image.height > 0 && image.pixels.size() == pixels, InternalError, "encode_png: a ",
            image.width, "x", image.height, " image needs ", pixels, " bytes of RGB, got ", image.pixels.size());
  // libpng's simplified API writes the pixels' chunks only: no time or text that would vary.
  png_image png{};
  png.version = PNG_IMAGE_VERSION;
  png.width = static_cast<png_uint_32>(image.width);
  png.height = static_cast<png_uint_32>(image.height);
  png.format = PNG_FORMAT_RGB;
  png_alloc_size_t size = 0;  // first asked for, then written
  DPT_CHECK(png_image_write_to_memory(&png, nullptr, &size, 0, image.pixels.data(), 0, nullptr), InternalError,
            "cannot encode a PNG: ", png.message);
  std::vector<uint8_t> bytes(size);
  DPT_CHECK(png_image_write_to_memory(&png, bytes.data(), &size, 0, image.pixels.data(), 0, nullptr), InternalError,
            "cannot encode a PNG: ", png.message);
  bytes.resize(size);
  return bytes;
}

ImageSize png_size(const std::vector<uint8_t>& bytes, const std::string& name) {
  // IHDR is always first: 8-byte signature, 4-byte length, "IHDR", then big-endian width, height.
  DPT_CHECK(bytes.size() >= 24 && std::memcmp(bytes.data() + 12, "IHDR", 4) == 0, DataError,
            "cannot read the PNG header of ", name, ": the file is truncated or corrupt");
  auto be32 = [&](size_t at) {
    return static_cast<int>((uint32_t(bytes[at]) << 24) | (uint32_t(bytes[at + 1]) << 16) |
                            (uint32_t(bytes[at + 2]) << 8) | uint32_t(bytes[at + 3]));
  };
  return {be32(16), be32(20)};
}

Image decode_png(const std::vector<uint8_t>& bytes, const std::string& name) {
  PngSource source;
  source.data = bytes.data();
  source.size = bytes.size();
  Image image;
  const PngReader reader(source);
  DPT_CHECK(read_png(reader, source, image, name), DataError, "cannot decode PNG ", name, ": ", source.message,
            ". The file is truncated or corrupt.");
  return image;
}

}  // namespace dpt::data
