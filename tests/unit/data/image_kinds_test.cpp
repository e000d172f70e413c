// Every kind of JPEG and PNG decodes to the pixels torchvision's ImageFolder trains on: PIL's
// Image.open(path).convert("RGB"). Alpha and transparency are dropped rather than composited,
// CMYK is converted as PIL converts it, 16-bit samples are cut as PIL cuts them.
#include <jpeglib.h>

#include <gtest/gtest.h>

#include <cstdio>
#include <cstdlib>
#include <sstream>
#include <string>
#include <utility>
#include <vector>

#include "dptrain/common/error.h"
#include "dptrain/data/image.h"
#include "support/python_oracle.h"
#include "support/temp_dir.h"
#include "support/test_images.h"

using namespace dpt::data;

namespace {

// Writes PNGs of every colour type, bit depth and interlacing PIL and libpng read (PIL writes few
// of them, so the files are put together here), and beside each `<name>.rgb`, PIL's RGB bytes of
// it. Prints "made <name>" for each (PIL's warnings may come between).
constexpr const char* kMakePictures = R"PY(
import os, struct, sys, zlib
import numpy as np
from PIL import Image

def chunk(kind, data):
    return struct.pack(">I", len(data)) + kind + data + struct.pack(">I", zlib.crc32(kind + data))

def rows(samples, depth):
    """Scanlines without filtering: samples (rows x values) packed big-endian at `depth` bits."""
    out = b""
    for row in samples:
        if depth >= 8:
            data = row.astype(">u2" if depth == 16 else "u1").tobytes()
        else:
            bits = "".join(format(int(v), "0%db" % depth) for v in row)
            bits += "0" * (-len(bits) % 8)
            data = int(bits, 2).to_bytes(len(bits) // 8, "big")
        out += b"\0" + data
    return out

ADAM7 = [(0, 0, 8, 8), (4, 0, 8, 8), (0, 4, 4, 8), (2, 0, 4, 4), (0, 2, 2, 4), (1, 0, 2, 2), (0, 1, 1, 2)]

def png(path, pixels, colour, depth, interlace=False, chunks=b""):
    h, w, c = pixels.shape
    if interlace:
        parts = [pixels[y0::dy, x0::dx] for x0, y0, dx, dy in ADAM7]
        body = b"".join(rows(p.reshape(p.shape[0], -1), depth) for p in parts if p.size)
    else:
        body = rows(pixels.reshape(h, w * c), depth)
    header = struct.pack(">IIBBBBB", w, h, depth, colour, 0, 0, int(interlace))
    with open(path, "wb") as f:
        f.write(b"\x89PNG\r\n\x1a\n" + chunk(b"IHDR", header) + chunks + chunk(b"IDAT", zlib.compress(body)) +
                chunk(b"IEND", b""))

def make(root):
    rng = np.random.default_rng(7)
    h, w = 13, 21
    def samples(channels, depth):
        return rng.integers(0, 1 << depth, (h, w, channels))
    opaque_then_clear = np.full((h, w, 1), 255)
    opaque_then_clear[:3] = 0  # bright colours under alpha 0: compositing would turn them black
    rgb8 = samples(3, 8)
    rgb8[:3] = np.maximum(rgb8[:3], 128)
    palette = rng.integers(0, 256, 48).astype(np.uint8).tobytes()
    alphas = bytes([0, 40, 255, 0])
    png(root + "/rgb16.png", samples(3, 16), 2, 16)
    png(root + "/rgba16.png", np.concatenate([samples(3, 16), opaque_then_clear * 257], 2), 6, 16)
    png(root + "/grey_alpha16.png", np.concatenate([samples(1, 16), opaque_then_clear * 257], 2), 4, 16)
    grey16 = samples(1, 16)
    grey16[0] = rng.integers(0, 300, (w, 1))  # PIL clips at 255: values on both sides
    png(root + "/grey16.png", grey16, 0, 16)
    png(root + "/grey16_interlaced.png", grey16, 0, 16, interlace=True)
    for depth in (1, 2, 4):
        png(root + "/grey%d.png" % depth, samples(1, depth), 0, depth)
        png(root + "/palette%d.png" % depth, samples(1, depth), 3, depth,
            chunks=chunk(b"PLTE", palette) + chunk(b"tRNS", alphas))
    png(root + "/rgba8.png", np.concatenate([rgb8, opaque_then_clear], 2), 6, 8)
    png(root + "/grey_alpha8.png", np.concatenate([samples(1, 8) | 128, opaque_then_clear], 2), 4, 8)
    png(root + "/rgb8_interlaced.png", rgb8, 2, 8, interlace=True)
    png(root + "/rgb8_trns.png", rgb8, 2, 8, chunks=chunk(b"tRNS", struct.pack(">HHH", *rgb8[0, 0])))
    png(root + "/grey8_trns.png", samples(1, 8), 0, 8, chunks=chunk(b"tRNS", struct.pack(">H", 7)))
    png(root + "/rgb8_gamma.png", rgb8, 2, 8, chunks=chunk(b"gAMA", struct.pack(">I", 100000)))
    Image.fromarray(rgb8.astype(np.uint8)).convert("CMYK").save(root + "/cmyk.jpg", quality=90)
    Image.fromarray(rgb8[:, :, 1].astype(np.uint8)).save(root + "/grey.jpg", quality=90)
    for name in sorted(os.listdir(root)):
        with Image.open(os.path.join(root, name)) as picture:
            rgb = picture.convert("RGB").tobytes()
        with open(os.path.join(root, name + ".rgb"), "wb") as f:
            f.write(rgb)
        print("made", name)
)PY";

// A four-component JPEG as Adobe's programs write it: `stored` is JCS_CMYK or JCS_YCCK.
std::vector<uint8_t> encode_four_component_jpeg(int width, int height, J_COLOR_SPACE stored) {
  jpeg_compress_struct cinfo;
  jpeg_error_mgr errors;
  cinfo.err = jpeg_std_error(&errors);
  jpeg_create_compress(&cinfo);
  unsigned char* buffer = nullptr;
  unsigned long size = 0;
  jpeg_mem_dest(&cinfo, &buffer, &size);
  cinfo.image_width = static_cast<JDIMENSION>(width);
  cinfo.image_height = static_cast<JDIMENSION>(height);
  cinfo.input_components = 4;
  cinfo.in_color_space = JCS_CMYK;
  jpeg_set_defaults(&cinfo);
  jpeg_set_colorspace(&cinfo, stored);
  jpeg_set_quality(&cinfo, 90, TRUE);
  jpeg_start_compress(&cinfo, TRUE);
  const Image picture = dpt::testing::gradient_image(width, height);
  std::vector<uint8_t> row(static_cast<size_t>(width) * 4);
  while (cinfo.next_scanline < cinfo.image_height) {
    const int y = static_cast<int>(cinfo.next_scanline);
    for (int x = 0; x < width; ++x) {
      for (int c = 0; c < 3; ++c) row[4 * x + c] = picture.row(y)[3 * x + c];
      row[4 * x + 3] = static_cast<uint8_t>(255 - (x * 5 + y * 3) % 200);
    }
    JSAMPROW rows[1] = {row.data()};
    jpeg_write_scanlines(&cinfo, rows, 1);
  }
  jpeg_finish_compress(&cinfo);
  std::vector<uint8_t> bytes(buffer, buffer + size);
  jpeg_destroy_compress(&cinfo);
  std::free(buffer);
  return bytes;
}

}  // namespace

TEST(ImageKinds, EveryKindDecodesAsPillowConvertsItToRgb) {
  dpt::testing::TempDir dir;
  write_file(dir.path() + "/ycck.jpg", encode_four_component_jpeg(33, 17, JCS_YCCK));
  const auto made = dpt::testing::run_python(std::string(kMakePictures) + "make('" + dir.path() + "')\n");
  if (!made) DPT_MISSING_DEPENDENCY(dpt::testing::oracle_missing("PIL"));
  std::istringstream names(*made);
  int checked = 0;
  for (std::string line; std::getline(names, line);) {
    if (line.rfind("made ", 0) != 0) continue;
    const std::string name = line.substr(5);
    const std::string path = dir.path() + "/" + name;
    const std::vector<uint8_t> expected = read_file(path + ".rgb");
    const Image decoded = decode_image(read_file(path), path);
    EXPECT_EQ(decoded.pixels, expected) << name;
    ++checked;
  }
  EXPECT_EQ(checked, 20) << *made;
  // Made so that a composited alpha would show: PIL's RGB of the transparent rows is bright.
  EXPECT_GE(read_file(dir.path() + "/rgba8.png.rgb").at(0), 128);
  EXPECT_GE(read_file(dir.path() + "/grey_alpha8.png.rgb").at(0), 128);
}

// A region of a four-component JPEG, at full and reduced scale, is the same pixels as the
// matching part of the whole picture.
TEST(ImageKinds, RegionsOfCmykPicturesMatchTheWholeDecode) {
  for (const J_COLOR_SPACE stored : {JCS_CMYK, JCS_YCCK}) {
    const auto bytes = encode_four_component_jpeg(161, 97, stored);
    for (int d : {1, 2}) {
      const ImageSize s = scaled_size({161, 97}, d);
      const Image whole = decode_region(bytes, "a.jpg", d, {0, 0, s.width, s.height}).image;
      const PixelRect rect{s.width / 3, s.height / 4, s.width / 2, s.height / 2};
      const ImageRegion part = decode_region(bytes, "a.jpg", d, rect);
      EXPECT_EQ(dpt::testing::samples_differing(part, whole, rect), 0)
          << "colour space " << stored << ", scale 1/" << d;
    }
  }
}

// The other formats torchvision's ImageFolder lists (PIL opens them) are refused by name, so that
// the skip or the error says what to convert.
TEST(ImageKinds, OtherFormatsAreNamedInTheError) {
  dpt::testing::TempDir dir;
  const auto made = dpt::testing::run_python(
      "from PIL import Image\n"
      "picture = Image.new('RGB', (12, 9), (200, 30, 90))\n"
      "for name in ('a.webp', 'a.bmp', 'a.gif', 'a.tif', 'a.ppm', 'a.pgm'):\n"
      "    (picture.convert('L') if name.endswith('.pgm') else picture).save('" +
      dir.path() + "/' + name)\n");
  if (!made) DPT_MISSING_DEPENDENCY(dpt::testing::oracle_missing("PIL"));
  const std::vector<std::pair<std::string, std::string>> formats = {
      {"a.webp", "WebP"}, {"a.bmp", "BMP"},         {"a.gif", "GIF"},
      {"a.tif", "TIFF"},  {"a.ppm", "PPM/PGM"}, {"a.pgm", "PPM/PGM"}};
  for (const auto& [name, format] : formats) {
    const std::string path = dir.path() + "/" + name;
    try {
      decode_image(read_file(path), path);
      ADD_FAILURE() << name << " decoded";
    } catch (const dpt::DataError& e) {
      EXPECT_EQ(std::string(e.what()), "image file " + path + " is neither JPEG nor PNG (a " + format +
                                           " picture, which dptrain does not decode); convert it or remove it from "
                                           "the dataset");
    }
  }
}
