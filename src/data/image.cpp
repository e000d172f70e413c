#include "dptrain/data/image.h"

#include <jpeglib.h>
#include <png.h>
#include <turbojpeg.h>

#include <algorithm>
#include <cerrno>
#include <csetjmp>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <memory>

#include "dptrain/common/error.h"
#include "dptrain/common/read_file.h"

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
    cinfo.out_color_space = JCS_RGB;
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
    JSAMPROW rows[16];
    while (cinfo.output_scanline < end) {
      const JDIMENSION n = std::min<JDIMENSION>(end - cinfo.output_scanline, 16);
      for (JDIMENSION k = 0; k < n; ++k) {
        rows[k] = out->image.row(static_cast<int>(cinfo.output_scanline + k) - rect->top);
      }
      jpeg_read_scanlines(&cinfo, rows, n);
    }
  }
  jpeg_destroy_decompress(&cinfo);  // also stops a decode that has rows left
  return true;
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
  png_image png;
  std::memset(&png, 0, sizeof png);
  png.version = PNG_IMAGE_VERSION;
  std::unique_ptr<png_image, void (*)(png_imagep)> guard(&png, png_image_free);
  DPT_CHECK(png_image_begin_read_from_memory(&png, bytes.data(), bytes.size()), DataError, "cannot read PNG ", name,
            ": ", png.message, ". The file is truncated or corrupt.");
  png.format = PNG_FORMAT_RGB;
  Image image;
  image.width = static_cast<int>(png.width);
  image.height = static_cast<int>(png.height);
  image.pixels.resize(PNG_IMAGE_SIZE(png));
  DPT_CHECK(png_image_finish_read(&png, nullptr, image.pixels.data(), 0, nullptr), DataError, "cannot decode PNG ",
            name, ": ", png.message, ". The file is truncated or corrupt.");
  return image;
}

[[noreturn]] void unsupported(const std::vector<uint8_t>& bytes, const std::string& name) {
  if (bytes.empty()) throw DataError(str("image file ", name, " is empty (0 bytes)"));
  throw DataError(str("image file ", name,
                      " is neither JPEG nor PNG (first bytes do not match either "
                      "signature); convert it or remove it from the dataset"));
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
  DPT_CHECK(size.width <= kMaxImageSide && size.height <= kMaxImageSide &&
                int64_t{size.width} * size.height <= kMaxImagePixels,
            DataError, "image ", name, " claims ", size.width, "x", size.height, " pixels, more than dptrain decodes (",
            kMaxImageSide, " a side, ", kMaxImagePixels, " in all): a corrupt header or a decompression bomb");
  return size;
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
