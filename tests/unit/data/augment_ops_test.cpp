#include "dptrain/data/augment_ops.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <fstream>
#include <sstream>

#include "dptrain/common/error.h"
#include "dptrain/data/auto_augment.h"
#include "support/python_oracle.h"
#include "support/temp_dir.h"
#include "support/test_images.h"

using namespace dpt::data;

namespace {

struct OpCase {
  std::string op;
  double magnitude;
  Interpolation interpolation;
};

// Every op at magnitudes from its ranges in all the policies (both signs, the ends, the quarter
// turns that Pillow rotates by transposing), the geometric ones with both filters.
std::vector<OpCase> op_cases() {
  std::vector<OpCase> cases;
  const std::vector<std::pair<std::string, std::vector<double>>> geometric = {
      {"ShearX", {0.3, -0.17, 0.99}},    {"ShearY", {-0.3, 0.55}},
      {"TranslateX", {13.4, -7.0}},      {"TranslateY", {-18.9, 5.0}},
      {"Rotate", {30.0, -12.5, 90.0, -90.0, 180.0, 135.0, 0.0, 4.5}}};
  for (const auto& [op, magnitudes] : geometric) {
    for (double m : magnitudes) {
      for (auto filter : {Interpolation::Bilinear, Interpolation::Bicubic}) cases.push_back({op, m, filter});
    }
  }
  const std::vector<std::pair<std::string, std::vector<double>>> colour = {
      {"Brightness", {-0.9, 0.5, 0.99, 0.0}},
      {"Color", {-0.5, 0.9, -0.99}},
      {"Contrast", {-0.9, 0.3, 0.99}},
      {"Sharpness", {-0.9, 0.6, 0.99}},
      // 1 bit and up: Pillow 13 refuses 0 bits (PosterizeToNoBitsIsBlack checks those).
      {"Posterize", {1.0, 4.0, 6.0, 8.0}},
      {"Solarize", {255.0, 128.0, 25.5, 0.0}},
      {"AutoContrast", {0.0}},
      {"Equalize", {0.0}},
      {"Invert", {0.0}},
      {"Identity", {0.0}}};
  for (const auto& [op, magnitudes] : colour) {
    for (double m : magnitudes) cases.push_back({op, m, Interpolation::Bilinear});
  }
  return cases;
}

std::string python_mode(Interpolation interpolation) {
  return interpolation == Interpolation::Bicubic ? "InterpolationMode.BICUBIC" : "InterpolationMode.BILINEAR";
}

// A gradient with edges, with noise so that the filters and histograms have something to do,
// squeezed into [lo, hi] (a narrow range exercises AutoContrast's stretch and Equalize's steps).
Image test_image(int width, int height, int lo, int hi) {
  Image im = dpt::testing::gradient_image(width, height, 1);
  uint32_t state = 12345;
  for (auto& v : im.pixels) {
    state = state * 1664525u + 1013904223u;
    const int noisy = std::clamp(static_cast<int>(v) + static_cast<int>(state >> 28) - 8, 0, 255);
    v = static_cast<uint8_t>(lo + noisy * (hi - lo) / 255);
  }
  return im;
}

}  // namespace

// Each op against torchvision's _apply_op on the PIL image (torchvision.transforms.v1), on a
// square image (where Pillow turns quarter rotations into transposes) and an oblong one.
TEST(AugmentOps, EqualTorchvisionOnPilImagesByteForByte) {
  dpt::testing::TempDir dir;
  const std::vector<Image> images = {test_image(40, 40, 0, 255), test_image(37, 29, 90, 170)};
  const auto cases = op_cases();
  std::ostringstream script;
  script << "from PIL import Image\n"
            "from torchvision.transforms import InterpolationMode\n"
            "from torchvision.transforms.autoaugment import _apply_op\n"
            "cases = [";
  for (const auto& c : cases) {
    script << "('" << c.op << "', " << c.magnitude << ", " << python_mode(c.interpolation) << "), ";
  }
  script << "]\n";
  for (size_t i = 0; i < images.size(); ++i) {
    const std::string path = dir.path() + "/image" + std::to_string(i) + ".rgb";
    std::ofstream(path, std::ios::binary)
        .write(reinterpret_cast<const char*>(images[i].pixels.data()), images[i].pixels.size());
    script << "img = Image.frombytes('RGB', (" << images[i].width << ", " << images[i].height << "), open('" << path
           << "', 'rb').read())\n"
              "for op, m, mode in cases:\n"
              "    print(' '.join(map(str, _apply_op(img, op, m, interpolation=mode, fill=None).tobytes())))\n";
  }
  const auto out = dpt::testing::run_python(script.str());
  if (!out) DPT_MISSING_DEPENDENCY(dpt::testing::oracle_missing("torchvision"));
  const auto expected = dpt::testing::parse_lines<int>(*out);
  ASSERT_EQ(expected.size(), images.size() * cases.size());
  size_t line = 0;
  for (const Image& original : images) {
    for (const auto& c : cases) {
      Image image = original;
      apply_augment_op(image, parse_augment_op(c.op), c.magnitude, c.interpolation);
      const auto& want = expected[line++];
      ASSERT_EQ(want.size(), image.pixels.size());
      int differing = 0, worst = 0;
      for (size_t i = 0; i < want.size(); ++i) {
        const int d = std::abs(want[i] - image.pixels[i]);
        differing += d != 0;
        worst = std::max(worst, d);
      }
      EXPECT_EQ(differing, 0) << c.op << "(" << c.magnitude << ", " << to_string(c.interpolation) << ") on "
                              << original.width << "x" << original.height << ": largest difference " << worst;
    }
  }
}

// The magnitude tables (op order, bins, signs) equal torchvision's _augmentation_space, whose
// op order the draws index and whose float32 values reach the ops. torch.linspace's float32
// values depend on the CPU kernel that computes them (its vectorised chunks add the step to a
// chunk's base, its scalar tail multiplies), so they are matched within one float32 ulp.
TEST(AutoAugment, AugmentationSpacesEqualTorchvision) {
  const std::vector<std::pair<AutoAugmentPolicy, std::string>> policies = {
      {AutoAugmentPolicy::ImageNet, "AutoAugment()._augmentation_space(10, (29, 37))"},
      {AutoAugmentPolicy::RandAugment, "RandAugment()._augmentation_space(31, (29, 37))"},
      {AutoAugmentPolicy::TrivialAugmentWide, "TrivialAugmentWide()._augmentation_space(31)"},
      {AutoAugmentPolicy::AugMix, "AugMix()._augmentation_space(10, (29, 37))"}};
  std::string script = "from torchvision.transforms.autoaugment import *\n";
  for (const auto& [policy, call] : policies) {
    script += "for name, (m, signed) in " + call + ".items():\n"
              "    print(name, int(signed), ' '.join(repr(float(v)) for v in m.flatten().tolist()) if m.ndim else '')\n"
              "print('end')\n";
  }
  const auto out = dpt::testing::run_python(script);
  if (!out) DPT_MISSING_DEPENDENCY(dpt::testing::oracle_missing("torchvision"));
  std::istringstream lines(*out);
  for (const auto& [policy, call] : policies) {
    const auto space = AutoAugment(AutoAugmentOptions().policy(policy)).augmentation_space(37, 29);
    size_t i = 0;
    std::string line;
    while (std::getline(lines, line) && line != "end") {
      std::istringstream fields(line);
      std::string name;
      int is_signed = 0;
      fields >> name >> is_signed;
      std::vector<double> magnitudes;
      for (double v; fields >> v;) magnitudes.push_back(v);
      ASSERT_LT(i, space.size()) << call;
      EXPECT_EQ(to_string(space[i].op), name) << call << " entry " << i;
      EXPECT_EQ(space[i].signed_magnitude, is_signed == 1) << call << " " << name;
      ASSERT_EQ(space[i].magnitudes.size(), magnitudes.size()) << call << " " << name;
      for (size_t k = 0; k < magnitudes.size(); ++k) {
        EXPECT_LE(std::abs(space[i].magnitudes[k] - magnitudes[k]), std::abs(magnitudes[k]) * 0x1p-23)
            << call << " " << name << " bin " << k << ": " << space[i].magnitudes[k] << " against " << magnitudes[k];
      }
      ++i;
    }
    EXPECT_EQ(i, space.size()) << call;
  }
}

// AugMix's magnitudes reach 0 bits. Pillow before 13 and torchvision's tensor path keep no bit
// of any channel there, a black image; Pillow 13 refuses 0 bits, so no oracle says it here.
TEST(AugmentOps, PosterizeToNoBitsIsBlack) {
  Image image = test_image(37, 29, 90, 170);
  apply_augment_op(image, AugmentOp::Posterize, 0.0, Interpolation::Bilinear);
  EXPECT_EQ(std::count(image.pixels.begin(), image.pixels.end(), 0), static_cast<long>(image.pixels.size()));
}

TEST(AugmentOps, NamesRoundTrip) {
  for (int i = 0; i <= static_cast<int>(AugmentOp::Invert); ++i) {
    const auto op = static_cast<AugmentOp>(i);
    EXPECT_EQ(parse_augment_op(to_string(op)), op);
  }
  EXPECT_THROW(parse_augment_op("Blur"), dpt::ConfigError);
  EXPECT_THROW(parse_auto_augment_policy("rand"), dpt::ConfigError);
  EXPECT_EQ(parse_auto_augment_policy("ta_wide"), AutoAugmentPolicy::TrivialAugmentWide);
}
