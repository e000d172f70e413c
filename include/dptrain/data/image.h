#pragma once
// 8-bit RGB images and the codecs dptrain reads and writes them with: JPEG through libjpeg-turbo
// (with DCT-domain downscaling and partial decoding), PNG through libpng.
//
//   auto bytes = dpt::data::read_file("cat.jpg");
//   dpt::data::Image full = dpt::data::decode_image(bytes, "cat.jpg");
//   // Only a 100x80 window of the half-size decode:
//   dpt::data::ImageRegion part = dpt::data::decode_region(bytes, "cat.jpg", 2, {40, 30, 100, 80});

#include <cstdint>
#include <string>
#include <vector>

namespace dpt::data {

// Interleaved RGB, rows of width * 3 bytes, no padding.
struct Image {
  int width = 0;
  int height = 0;
  std::vector<uint8_t> pixels;

  const uint8_t* row(int y) const { return pixels.data() + static_cast<size_t>(y) * width * 3; }
  uint8_t* row(int y) { return pixels.data() + static_cast<size_t>(y) * width * 3; }
};

enum class ImageFormat { Jpeg, Png, Unknown };

// The format from the first bytes (not from the file name).
ImageFormat sniff_format(const std::vector<uint8_t>& bytes);

struct ImageSize {
  int width = 0;
  int height = 0;
};

// The largest picture dptrain decodes: libpng's default side limit, and twice PIL's decompression
// bomb threshold (where PIL refuses too). A header claiming more is corrupt or hostile; planning a
// resize for it would allocate filter taps in proportion before the decoder could refuse it.
constexpr int kMaxImageSide = 1000000;
constexpr int64_t kMaxImagePixels = 2 * 89478485;

// Whether `size` is within the limits above. Positive sides are the caller's to check.
inline bool within_decode_limits(ImageSize size) {
  return size.width <= kMaxImageSide && size.height <= kMaxImageSide &&
         int64_t{size.width} * size.height <= kMaxImagePixels;
}
// Why a size beyond them is refused, to follow the image's name in an error: "claims WxH pixels, ...".
std::string beyond_decode_limits(ImageSize size);

// Width and height without decoding the pixels. Throws DataError naming `name` if the bytes are
// neither a readable JPEG nor PNG header, or claim no pixels or more than the limits above.
ImageSize read_image_size(const std::vector<uint8_t>& bytes, const std::string& name);

// The largest JPEG downscale 1/d (d = 1, 2, 4 or 8) that keeps at least `at_least` pixels each
// way. libjpeg-turbo has SIMD inverse DCTs for these; the other k/8 scales run slower C code than
// a full-size decode.
int jpeg_scale_denominator(ImageSize full, ImageSize at_least);
// What a 1/denominator decode produces: ceil(full / denominator).
ImageSize scaled_size(ImageSize full, int denominator);

struct PixelRect {
  int left = 0, top = 0, width = 0, height = 0;
};

// A part of a (possibly downscaled) picture: `image` holds its pixels
// [left, left + image.width) x [top, top + image.height).
struct ImageRegion {
  Image image;
  int left = 0;
  int top = 0;
};

// Decodes at least the pixels in `rect` of the picture scaled by 1/denominator. For JPEG, rows
// above the rect are only entropy-decoded, rows below it not at all, and only the block columns
// covering it go through the inverse DCT and colour conversion; a truncated file fails only when
// the rect's rows are missing. PNG (denominator 1 only) is decoded whole. The pixels are those
// torchvision's ImageFolder trains on, PIL's Image.convert("RGB"): grey is expanded, CMYK
// converted as PIL does, alpha and transparency dropped (not composited), 16-bit samples cut as
// PIL cuts them. Corrupt data, including libjpeg's corrupt-data warnings, throws DataError
// naming `name`.
ImageRegion decode_region(const std::vector<uint8_t>& bytes, const std::string& name, int denominator, PixelRect rect);
// The same into `out`, reusing its pixel buffer: a loader thread that decodes image after image
// into one region spares the allocator a fresh half-megabyte (and its page faults) per image.
void decode_region(const std::vector<uint8_t>& bytes, const std::string& name, int denominator, PixelRect rect,
                   ImageRegion& out);
// The whole image at full size.
Image decode_image(const std::vector<uint8_t>& bytes, const std::string& name);

// Baseline JPEG with 4:2:0 chroma subsampling, like PIL's default.
std::vector<uint8_t> encode_jpeg(const Image& image, int quality);
// An 8-bit RGB PNG, lossless, with no chunk but the pixels' (the same pixels give the same bytes).
std::vector<uint8_t> encode_png(const Image& image);

// The whole file; throws DataError naming it when it cannot be opened or read.
std::vector<uint8_t> read_file(const std::string& path);
void write_file(const std::string& path, const std::vector<uint8_t>& bytes);

}  // namespace dpt::data
