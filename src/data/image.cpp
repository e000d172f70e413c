#include "dptrain/data/image.h"

#include <jpeglib.h>
#include <turbojpeg.h>

#include <algorithm>
#include <cctype>
#include <cerrno>
#include <csetjmp>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <memory>
#include <string_view>

#include "dptrain/common/error.h"
#include "dptrain/common/read_file.h"
#include "png_codec.h"

namespace dpt::data {

namespace {

// libjpeg reports errors through a callback that must not return; it jumps back to read_jpeg.
struct JpegErrors {
  jpeg_error_mgr manager;
  std::jmp_buf jump;
  char message[JMSG_LENGTH_MAX];
};

[[noreturn]] void jpeg_fail(j_common_ptr cinfo) {
  auto* errors = reinterpret_cast<JpegErrors*>(cinfo->err);
  (*cinfo->err->format_message)(cinfo, errors->message);
  std::longjmp(errors->jump, 1);
}

// Level -1 is a corrupt-data warning (premature end of file, bad Huffman code): libjpeg would fill
// the rest with grey and carry on, which would train on garbage. Treat it as an error.
void jpeg_message(j_common_ptr cinfo, int level) {
  if (level < 0) jpeg_fail(cinfo);
}

// PIL reads a four-component JPEG as Adobe's programs write it, inverted ("CMYK;I"), and turns
// CMYK into RGB as (255 - C) * (255 - K) / 255, rounded; on the values as stored, C * K / 255.
// 255 is odd, so no product falls halfway: adding 127 rounds.
void cmyk_to_rgb(const JSAMPLE* cmyk, uint8_t* rgb, JDIMENSION width) {
  for (JDIMENSION x = 0; x < width; ++x, cmyk += 4, rgb += 3) {
    for (int c = 0; c < 3; ++c) rgb[c] = static_cast<uint8_t>((cmyk[c] * cmyk[3] + 127) / 255);
  }
}

// Reads the header into `size` and, when `rect` is given, decodes that region of the
// 1/denominator picture into `out`. Returns false with libjpeg's message on bad data. Only plain
// C objects live in this frame, so the longjmp from an error skips no destructor.
bool read_jpeg(const std::vector<uint8_t>& bytes, int denominator, const PixelRect* rect, ImageSize* size,
               ImageRegion* out, char* message) {
  jpeg_decompress_struct cinfo;
  JpegErrors errors;
  cinfo.err = jpeg_std_error(&errors.manager);
  errors.manager.error_exit = jpeg_fail;
  errors.manager.emit_message = jpeg_message;
  if (setjmp(errors.jump)) {
    std::memcpy(message, errors.message, JMSG_LENGTH_MAX);
    jpeg_destroy_decompress(&cinfo);
    return false;
  }
  jpeg_create_decompress(&cinfo);
  jpeg_mem_src(&cinfo, bytes.data(), static_cast<unsigned long>(bytes.size()));
  jpeg_read_header(&cinfo, TRUE);
  size->width = static_cast<int>(cinfo.image_width);
  size->height = static_cast<int>(cinfo.image_height);
  if (rect) {
    // Four components (CMYK, or YCCK, which libjpeg turns into CMYK) come out as CMYK and are
    // converted row by row, as PIL converts them.
    const bool cmyk = cinfo.jpeg_color_space == JCS_CMYK || cinfo.jpeg_color_space == JCS_YCCK;
    cinfo.out_color_space = cmyk ? JCS_CMYK : JCS_RGB;
    cinfo.scale_num = 1;
    cinfo.scale_denom = static_cast<unsigned>(denominator);
    jpeg_start_decompress(&cinfo);
    // Cropped columns are widened to whole blocks. Their outermost pixels lack the neighbouring
    // chroma sample that fancy upsampling blends in, so one more column is asked for on each side:
    // then every pixel of the rect equals a full decode's.
    const int first = std::max(rect->left - 1, 0);
    const int last = std::min(rect->left + rect->width + 1, static_cast<int>(cinfo.output_width));
    JDIMENSION left = static_cast<JDIMENSION>(first), width = static_cast<JDIMENSION>(last - first);
    if (left > 0 || width < cinfo.output_width) jpeg_crop_scanline(&cinfo, &left, &width);
    if (rect->top > 0) jpeg_skip_scanlines(&cinfo, static_cast<JDIMENSION>(rect->top));
    out->left = static_cast<int>(left);
    out->top = rect->top;
    out->image.width = static_cast<int>(width);
    out->image.height = rect->height;
    out->image.pixels.resize(static_cast<size_t>(width) * rect->height * 3);
    // Several rows per call: libjpeg then writes upsampled row pairs straight into them instead
    // of through its spare row.
    const JDIMENSION end = static_cast<JDIMENSION>(rect->top + rect->height);
    constexpr JDIMENSION kRows = 16;
    // CMYK rows first go to libjpeg's own memory, released with the decompressor.
    JSAMPARRAY cmyk_rows =
        cmyk ? (*cinfo.mem->alloc_sarray)(reinterpret_cast<j_common_ptr>(&cinfo), JPOOL_IMAGE, width * 4, kRows)
             : nullptr;
    JSAMPROW rows[kRows];
    while (cinfo.output_scanline < end) {
      const int first_row = static_cast<int>(cinfo.output_scanline) - rect->top;
      const JDIMENSION n = std::min<JDIMENSION>(end - cinfo.output_scanline, kRows);
      for (JDIMENSION k = 0; k < n; ++k) rows[k] = cmyk ? cmyk_rows[k] : out->image.row(first_row + int(k));
      const JDIMENSION got = jpeg_read_scanlines(&cinfo, rows, n);
      for (JDIMENSION k = 0; cmyk && k < got; ++k) cmyk_to_rgb(cmyk_rows[k], out->image.row(first_row + int(k)), width);
    }
  }
  jpeg_destroy_decompress(&cinfo);  // also stops a decode that has rows left
  return true;
}

// The formats torchvision's ImageFolder also lists (PIL opens them) that dptrain does not decode,
// by their first bytes: a dataset holding them needs converting, which the error should say.
const char* other_picture_format(const std::vector<uint8_t>& bytes) {
  auto starts = [&](std::string_view magic, size_t at = 0) {
    return bytes.size() >= at + magic.size() && std::memcmp(bytes.data() + at, magic.data(), magic.size()) == 0;
  };
  using namespace std::string_view_literals;
  if (starts("RIFF") && starts("WEBP", 8)) return "WebP";
  if (starts("BM") && starts("\0\0\0\0"sv, 6)) return "BMP";  // then the file size, then 4 reserved zero bytes
  if (starts("GIF8")) return "GIF";
  if (starts("II*\0"sv) || starts("MM\0*"sv)) return "TIFF";
  if (bytes.size() >= 3 && bytes[0] == 'P' && bytes[1] >= '1' && bytes[1] <= '6' && std::isspace(bytes[2])) {
    return "PPM/PGM";
  }
  return nullptr;
}

[[noreturn]] void unsupported(const std::vector<uint8_t>& bytes, const std::string& name) {
  if (bytes.empty()) throw DataError(str("image file ", name, " is empty (0 bytes)"));
  const char* format = other_picture_format(bytes);
  throw DataError(str("image file ", name, " is neither JPEG nor PNG (",
                      format ? str("a ", format, " picture, which dptrain does not decode")
                             : std::string("first bytes do not match either signature"),
                      "); convert it or remove it from the dataset"));
}

}  // namespace

ImageFormat sniff_format(const std::vector<uint8_t>& bytes) {
  static const uint8_t kPng[8] = {0x89, 'P', 'N', 'G', '\r', '\n', 0x1a, '\n'};
  if (bytes.size() >= 3 && bytes[0] == 0xFF && bytes[1] == 0xD8 && bytes[2] == 0xFF) return ImageFormat::Jpeg;
  if (bytes.size() >= 8 && std::memcmp(bytes.data(), kPng, 8) == 0) return ImageFormat::Png;
  return ImageFormat::Unknown;
}

ImageSize read_image_size(const std::vector<uint8_t>& bytes, const std::string& name) {
  ImageSize size;
  switch (sniff_format(bytes)) {
    case ImageFormat::Jpeg: {
      char message[JMSG_LENGTH_MAX];
      DPT_CHECK(read_jpeg(bytes, 1, nullptr, &size, nullptr, message), DataError, "cannot read the JPEG header of ",
                name, ": ", message, ". The file is corrupt or not a JPEG.");
      break;
    }
    case ImageFormat::Png:
      size = png_size(bytes, name);
      break;
    case ImageFormat::Unknown:
      unsupported(bytes, name);
  }
  DPT_CHECK(size.width > 0 && size.height > 0, DataError, "image ", name, " has no pixels (", size.width, "x",
            size.height, ")");
  DPT_CHECK(within_decode_limits(size), DataError, "image ", name, " ", beyond_decode_limits(size));
  return size;
}

std::string beyond_decode_limits(ImageSize size) {
  return str("claims ", size.width, "x", size.height, " pixels, more than dptrain decodes (", kMaxImageSide,
             " a side, ", kMaxImagePixels, " in all): a corrupt header or a decompression bomb");
}

int jpeg_scale_denominator(ImageSize full, ImageSize at_least) {
  int best = 1;
  for (int d = 2; d <= 8; d *= 2) {
    const ImageSize s = scaled_size(full, d);
    if (s.width >= at_least.width && s.height >= at_least.height) best = d;
  }
  return best;
}

ImageSize scaled_size(ImageSize full, int denominator) {
  return {(full.width + denominator - 1) / denominator, (full.height + denominator - 1) / denominator};
}

ImageRegion decode_region(const std::vector<uint8_t>& bytes, const std::string& name, int denominator, PixelRect rect) {
  ImageRegion region;
  decode_region(bytes, name, denominator, rect, region);
  return region;
}

void decode_region(const std::vector<uint8_t>& bytes, const std::string& name, int denominator, PixelRect rect,
                   ImageRegion& region) {
  switch (sniff_format(bytes)) {
    case ImageFormat::Jpeg: {
      ImageSize size;
      char message[JMSG_LENGTH_MAX];
      DPT_CHECK(read_jpeg(bytes, denominator, &rect, &size, &region, message), DataError, "cannot decode JPEG ", name,
                ": ", message, ". The file is truncated or corrupt.");
      break;
    }
    case ImageFormat::Png:
      DPT_ASSERT(denominator == 1, "PNG cannot be decoded at 1/", denominator);
      region.image = decode_png(bytes, name);
      region.left = region.top = 0;  // the whole picture, whatever a JPEG before left in `region`
      break;
    case ImageFormat::Unknown:
      unsupported(bytes, name);
  }
}

Image decode_image(const std::vector<uint8_t>& bytes, const std::string& name) {
  const ImageSize size = read_image_size(bytes, name);
  return decode_region(bytes, name, 1, {0, 0, size.width, size.height}).image;
}

std::vector<uint8_t> encode_jpeg(const Image& image, int quality) {
  std::unique_ptr<void, int (*)(tjhandle)> handle(tjInitCompress(), tjDestroy);
  DPT_CHECK(handle, InternalError, "tjInitCompress failed: ", tjGetErrorStr2(nullptr));
  unsigned char* buffer = nullptr;
  unsigned long size = 0;
  const int rc = tjCompress2(handle.get(), image.pixels.data(), image.width, 0, image.height, TJPF_RGB, &buffer, &size,
                             TJSAMP_420, quality, 0);
  std::unique_ptr<unsigned char, void (*)(unsigned char*)> owned(buffer, tjFree);
  DPT_CHECK(rc == 0, DataError, "cannot encode a ", image.width, "x", image.height,
            " JPEG: ", tjGetErrorStr2(handle.get()));
  return std::vector<uint8_t>(buffer, buffer + size);
}

std::vector<uint8_t> read_file(const std::string& path) {
  auto bytes = dpt::read_file<std::vector<uint8_t>>(path);
  DPT_CHECK(bytes, DataError, "cannot open ", path, ": ", std::strerror(errno));
  return std::move(*bytes);
}

void write_file(const std::string& path, const std::vector<uint8_t>& bytes) {
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  DPT_CHECK(out, DataError, "cannot create ", path, ": ", std::strerror(errno));
  out.write(reinterpret_cast<const char*>(bytes.data()), static_cast<std::streamsize>(bytes.size()));
  DPT_CHECK(out, DataError, "cannot write ", path, ": ", std::strerror(errno));
}

}  // namespace dpt::data
