#include "dptrain/data/image.h"

#include <gtest/gtest.h>

#include <zlib.h>

#include <random>

#include "dptrain/common/error.h"
#include "dptrain/data/cifar.h"
#include "dptrain/data/transform.h"
#include "support/temp_dir.h"
#include "support/test_images.h"

using namespace dpt::data;

TEST(ImageCodec, JpegRoundTripIsClose) {
  const Image original = dpt::testing::gradient_image(40, 24);
  const auto bytes = encode_jpeg(original, 95);
  EXPECT_EQ(sniff_format(bytes), ImageFormat::Jpeg);
  const ImageSize size = read_image_size(bytes, "a.jpg");
  EXPECT_EQ(size.width, 40);
  EXPECT_EQ(size.height, 24);
  const Image decoded = decode_image(bytes, "a.jpg");
  ASSERT_EQ(decoded.pixels.size(), original.pixels.size());
  double total = 0;
  for (size_t i = 0; i < decoded.pixels.size(); ++i) total += std::abs(decoded.pixels[i] - original.pixels[i]);
  EXPECT_LT(total / decoded.pixels.size(), 4.0);
}

TEST(ImageCodec, DctScalingPicksTheLargestCoveringPowerOfTwo) {
  // 160x96 must keep 50x30: 1/2 gives 80x48, 1/4 would give 40x24.
  EXPECT_EQ(jpeg_scale_denominator({160, 96}, {50, 30}), 2);
  EXPECT_EQ(jpeg_scale_denominator({160, 96}, {1, 1}), 8);
  EXPECT_EQ(jpeg_scale_denominator({160, 96}, {161, 1}), 1);
  EXPECT_EQ(scaled_size({161, 97}, 4).width, 41);
  EXPECT_EQ(scaled_size({161, 97}, 4).height, 25);
}

// A region decode is the same pixels as the matching part of a whole decode at that scale.
TEST(ImageCodec, RegionsMatchTheWholeDecode) {
  const auto bytes = encode_jpeg(dpt::testing::gradient_image(161, 97), 90);
  for (int d : {1, 2, 4}) {
    const ImageSize s = scaled_size({161, 97}, d);
    const Image whole = decode_region(bytes, "a.jpg", d, {0, 0, s.width, s.height}).image;
    ASSERT_EQ(whole.width, s.width);
    ASSERT_EQ(whole.height, s.height);
    // One rect inside, one starting on a 16-pixel block boundary and ending on the image's edge.
    for (const PixelRect rect : {PixelRect{s.width / 3, s.height / 4, s.width / 2, s.height / 2},
                                 PixelRect{16 / d, 8 / d, s.width - 16 / d, s.height / 2}}) {
      const ImageRegion part = decode_region(bytes, "a.jpg", d, rect);
      ASSERT_LE(part.left, rect.left);
      ASSERT_EQ(part.top, rect.top);
      ASSERT_GE(part.left + part.image.width, rect.left + rect.width);
      ASSERT_EQ(part.image.height, rect.height);
      EXPECT_EQ(dpt::testing::samples_differing(part, whole, rect), 0)
          << "scale 1/" << d << ", rect left " << rect.left;
    }
  }
}

// A loader thread reuses one region for every image: a PNG after a cropped JPEG is the whole
// picture at (0, 0), not at the JPEG's offset (which failed the resize's check, found by fuzz/).
TEST(ImageCodec, APngAfterAJpegRegionStartsAtTheOrigin) {
  const Image picture = dpt::testing::gradient_image(12, 10);
  const std::vector<uint8_t> png_bytes = encode_png(picture);
  ImageRegion region;
  decode_region(encode_jpeg(dpt::testing::gradient_image(64, 48), 90), "a.jpg", 1, {33, 20, 8, 8}, region);
  ASSERT_GT(region.left, 0);
  decode_region(png_bytes, "b.png", 1, {0, 0, 12, 10}, region);
  EXPECT_EQ(region.left, 0);
  EXPECT_EQ(region.top, 0);
  EXPECT_EQ(region.image.pixels, picture.pixels);
}

TEST(ImageCodec, BadBytesNameTheFile) {
  auto message_of = [](const std::vector<uint8_t>& bytes) {
    try {
      decode_image(bytes, "dir/bad.jpg");
    } catch (const dpt::DataError& e) {
      return std::string(e.what());
    }
    return std::string("no error");
  };
  EXPECT_EQ(message_of({}), "image file dir/bad.jpg is empty (0 bytes)");
  EXPECT_NE(message_of({'h', 'e', 'l', 'l', 'o'}).find("dir/bad.jpg is neither JPEG nor PNG"), std::string::npos);
  auto jpeg = encode_jpeg(dpt::testing::gradient_image(64, 64), 90);
  jpeg.resize(jpeg.size() / 2);
  const std::string truncated = message_of(jpeg);
  EXPECT_NE(truncated.find("cannot decode JPEG dir/bad.jpg"), std::string::npos) << truncated;
}

// A header's size is checked before anything is planned for it: a PNG claiming 4259840 x 1536
// made the transform allocate 400 MB of filter taps and spend 4 s before libpng refused it (fuzz/).
TEST(ImageCodec, HeadersClaimingTooManyPixelsAreRefused) {
  auto png_header = [](uint32_t width, uint32_t height) {
    std::vector<uint8_t> bytes = {0x89, 'P', 'N', 'G', '\r', '\n', 0x1a, '\n', 0, 0, 0, 13, 'I', 'H', 'D', 'R'};
    for (uint32_t v : {width, height}) {
      for (int shift = 24; shift >= 0; shift -= 8) bytes.push_back(static_cast<uint8_t>(v >> shift));
    }
    return bytes;
  };
  EXPECT_EQ(read_image_size(png_header(kMaxImageSide, 178), "big.png").width, kMaxImageSide);  // 178 M pixels
  for (const auto& [width, height] : {std::pair<uint32_t, uint32_t>{kMaxImageSide + 1, 1}, {1, kMaxImageSide + 1},
                                      {20000, 10000}, {4259840, 1536}, {0x80000000u, 1}}) {
    try {
      read_image_size(png_header(width, height), "dir/bomb.png");
      ADD_FAILURE() << width << "x" << height << " was accepted";
    } catch (const dpt::DataError& e) {
      EXPECT_NE(std::string(e.what()).find("dir/bomb.png"), std::string::npos) << e.what();
    }
  }
}

// decode_region does not ask read_image_size first: a PNG whose header (with its CRC) claims a
// million pixels a side must still be refused before its pixels are allocated, as a DataError.
TEST(ImageCodec, APngDecodedWithoutItsSizeCheckedIsRefusedByTheSameLimits) {
  const std::vector<uint8_t> bytes = encode_png(dpt::testing::gradient_image(12, 10));
  for (const auto& [width, height] : {std::pair<uint32_t, uint32_t>{kMaxImageSide, kMaxImageSide}, {20000, 10000}}) {
    std::vector<uint8_t> bomb = bytes;
    // IHDR's data at 16..28 and its CRC, over type and data, at 29..32.
    for (int i = 0; i < 4; ++i) {
      bomb[16 + i] = static_cast<uint8_t>(width >> (24 - 8 * i));
      bomb[20 + i] = static_cast<uint8_t>(height >> (24 - 8 * i));
    }
    const uint32_t crc = static_cast<uint32_t>(crc32(crc32(0, nullptr, 0), bomb.data() + 12, 17));
    for (int i = 0; i < 4; ++i) bomb[29 + i] = static_cast<uint8_t>(crc >> (24 - 8 * i));
    ImageRegion region;
    try {
      decode_region(bomb, "dir/bomb.png", 1, {0, 0, 12, 10}, region);
      ADD_FAILURE() << width << "x" << height << " was decoded";
    } catch (const dpt::DataError& e) {
      const std::string message = e.what();
      EXPECT_NE(message.find(dpt::str("cannot decode PNG dir/bomb.png: it claims ", width, "x", height, " pixels")),
                std::string::npos)
          << message;
      const std::string cause = ": a corrupt header or a decompression bomb";  // and nothing after it
      EXPECT_EQ(message.rfind(cause), message.size() - cause.size()) << message;
    }
  }
}

// Random, truncated and bit-flipped inputs must end in a DataError or a valid image, never a crash.
TEST(ImageCodec, FuzzedInputsNeverCrash) {
  std::mt19937 gen(1234);
  const auto jpeg = encode_jpeg(dpt::testing::gradient_image(48, 32), 85);
  Transform eval(TransformOptions().size(16).resize(20));
  std::vector<float> out(eval.sample_numel());
  int errors = 0, decoded = 0;
  for (int trial = 0; trial < 300; ++trial) {
    std::vector<uint8_t> bytes;
    if (trial % 3 == 0) {
      bytes.resize(gen() % 400);
      for (auto& b : bytes) b = static_cast<uint8_t>(gen());
      if (trial % 2 == 0 && bytes.size() >= 3) bytes[0] = 0xFF, bytes[1] = 0xD8, bytes[2] = 0xFF;
    } else if (trial % 3 == 1) {
      bytes.assign(jpeg.begin(), jpeg.begin() + gen() % jpeg.size());
    } else {
      bytes = jpeg;
      for (int flips = 0; flips < 4; ++flips) bytes[gen() % bytes.size()] ^= static_cast<uint8_t>(1 + gen() % 255);
    }
    try {
      eval.apply_encoded(bytes, "fuzz", 0, trial, out.data());
      ++decoded;
    } catch (const dpt::DataError&) {
      ++errors;
    }
  }
  EXPECT_EQ(errors + decoded, 300);
  EXPECT_GT(errors, 100);
}

TEST(Cifar10, FuzzedAndWrongSizedFilesFailCleanly) {
  std::mt19937 gen(99);
  int accepted = 0;
  for (int trial = 0; trial < 100; ++trial) {
    std::vector<uint8_t> bytes(gen() % 3 == 0 ? kCifarRecordBytes * (1 + gen() % 3) : gen() % 10000);
    for (auto& b : bytes) b = static_cast<uint8_t>(gen() % (trial % 2 ? 256 : 10));
    try {
      Cifar10 c(bytes, "fuzz.bin", Transform(TransformOptions().size(32).resize(32)));
      std::vector<float> out(c.sample_numel());
      for (int64_t i = 0; i < c.size(); ++i) EXPECT_LT(c.get(i, 0, out.data()), 10);
      ++accepted;
    } catch (const dpt::DataError&) {
    }
  }
  EXPECT_GT(accepted, 0);
  try {
    Cifar10(std::vector<uint8_t>(3074, 0), "data_batch_1.bin", Transform(TransformOptions().size(32).resize(32)));
    FAIL() << "no error for a 3074-byte file";
  } catch (const dpt::DataError& e) {
    EXPECT_EQ(std::string(e.what()),
              "CIFAR-10 file data_batch_1.bin has 3074 bytes, which is not a positive multiple of the 3073-byte "
              "record (the standard files have 30730000 bytes); is it the binary version, complete?");
  }
}

TEST(Cifar10, RecordsRoundTripAndMissingFilesAreNamed) {
  dpt::testing::TempDir dir;
  std::vector<Image> images;
  std::vector<int64_t> labels;
  for (int i = 0; i < 3; ++i) {
    images.push_back(dpt::testing::gradient_image(32, 32, i));
    labels.push_back(7 - i);
  }
  write_file(dir.path() + "/test_batch.bin", cifar_records(images, labels));
  Cifar10 test(dir.path(), /*train=*/false, Transform(TransformOptions().size(32).resize(32)));
  ASSERT_EQ(test.size(), 3);
  EXPECT_EQ(test.label(2), 5);
  EXPECT_EQ(test.image(1).pixels, images[1].pixels);
  EXPECT_EQ(test.describe(1), dir.path() + "/test_batch.bin record 1");
  try {
    Cifar10(dir.path(), /*train=*/true, Transform(TransformOptions().size(32).resize(32)));
    FAIL() << "no error for missing train files";
  } catch (const dpt::DataError& e) {
    EXPECT_NE(std::string(e.what()).find("data_batch_1.bin"), std::string::npos) << e.what();
  }
}
