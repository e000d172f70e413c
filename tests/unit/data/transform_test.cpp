#include "dptrain/data/transform.h"

#include <gtest/gtest.h>

#include <cmath>
#include <tuple>

#include "dptrain/common/error.h"
#include "support/python_oracle.h"
#include "support/temp_dir.h"
#include "support/test_images.h"

using namespace dpt::data;

namespace {

// torchvision's output for the same file, as one line of floats per transform.
std::optional<std::vector<std::vector<double>>> torchvision_outputs(const std::string& path,
                                                                    const std::string& transforms) {
  const std::string script =
      "import torch\n"
      "import torchvision.transforms as T\n"
      "import torchvision.transforms.functional as F\n"
      "from torchvision.datasets.folder import pil_loader\n"
      "img = pil_loader('" +
      path +
      "')\n"
      "norm = T.Compose([T.ToTensor(), T.Normalize([0.485, 0.456, 0.406], [0.229, 0.224, 0.225])])\n"
      "for t in [" +
      transforms +
      "]:\n"
      "    print(' '.join(repr(v) for v in norm(t(img)).flatten().tolist()))\n";
  auto out = dpt::testing::run_python(script);
  if (!out) return std::nullopt;
  return dpt::testing::parse_lines<double>(*out);
}

double max_abs_diff(const std::vector<float>& a, const std::vector<double>& b) {
  EXPECT_EQ(a.size(), b.size());
  double worst = 0;
  for (size_t i = 0; i < std::min(a.size(), b.size()); ++i) worst = std::max(worst, std::abs(a[i] - b[i]));
  return worst;
}

// Floats starting `offset` floats past a 32-byte boundary: aligned outputs take the AVX2
// streaming normalization, misaligned ones the portable loop.
class OffsetBuffer {
 public:
  OffsetBuffer(size_t n, size_t offset) : storage_(n + 16), n_(n) {
    const auto address = reinterpret_cast<uintptr_t>(storage_.data());
    data_ = storage_.data() + ((32 - address % 32) % 32) / sizeof(float) + offset;
  }
  float* data() { return data_; }
  std::vector<float> values() const { return {data_, data_ + n_}; }

 private:
  std::vector<float> storage_;
  float* data_;
  size_t n_;
};

double mean_abs_diff(const std::vector<float>& a, const std::vector<double>& b) {
  double total = 0;
  for (size_t i = 0; i < std::min(a.size(), b.size()); ++i) total += std::abs(a[i] - b[i]);
  return total / static_cast<double>(a.size());
}

}  // namespace

// Resize(40) + CenterCrop(32) of a 75x50 JPEG, against torchvision 0.14 on the PIL image.
// Full-scale decoding reproduces PIL's fixed-point filter: equal up to float rounding.
// With DCT scaling (here a 1/2 decode for Resize(24) + CenterCrop(20)) it stays close.
TEST(Transform, EvalMatchesTorchvision) {
  dpt::testing::TempDir dir;
  const std::string path = dir.path() + "/a.jpg";
  const auto bytes = encode_jpeg(dpt::testing::gradient_image(75, 50), 90);
  write_file(path, bytes);
  auto expected = torchvision_outputs(
      path, "T.Compose([T.Resize(40), T.CenterCrop(32)]), T.Compose([T.Resize(24), T.CenterCrop(20)])");
  if (!expected) DPT_MISSING_DEPENDENCY(dpt::testing::oracle_missing("torchvision"));
  ASSERT_EQ(expected->size(), 2u);

  Transform exact(TransformOptions().resize(40).size(32).dct_scaling(false));
  std::vector<float> out(exact.sample_numel());
  exact.apply_encoded(bytes, path, 0, 0, out.data());
  EXPECT_LT(max_abs_diff(out, (*expected)[0]), 1e-6);

  Transform scaled(TransformOptions().resize(24).size(20));
  std::vector<float> small(scaled.sample_numel());
  scaled.apply_encoded(bytes, path, 0, 0, small.data());
  // One 8-bit level is 1 / 255 / 0.225 = 0.0174 after normalization. The half-size IDCT is a
  // different low-pass filter from PIL's: about 3 levels on average, up to 30 at the sharp
  // edges of the test picture's box.
  EXPECT_LT(max_abs_diff(small, (*expected)[1]), 0.6);
  EXPECT_LT(mean_abs_diff(small, (*expected)[1]), 0.06);
}

// The train path with its crop fixed: torchvision's resized_crop + hflip on the same crop box.
TEST(Transform, TrainCropMatchesTorchvisionResizedCrop) {
  dpt::testing::TempDir dir;
  const std::string path = dir.path() + "/a.jpg";
  const auto bytes = encode_jpeg(dpt::testing::gradient_image(64, 48), 90);
  write_file(path, bytes);
  Transform train(TransformOptions().mode(TransformMode::Train).size(24).seed(3).dct_scaling(false));
  CropPlan plan;
  for (int64_t index = 0;; ++index) {  // a sample whose crop is flipped
    plan = train.plan(64, 48, 0, index);
    if (plan.flip) break;
  }
  auto expected = torchvision_outputs(path, dpt::str("lambda im: F.hflip(F.resized_crop(im, ", plan.top, ", ",
                                                     plan.left, ", ", plan.height, ", ", plan.width, ", [24, 24]))"));
  if (!expected) DPT_MISSING_DEPENDENCY(dpt::testing::oracle_missing("torchvision"));
  std::vector<float> out(train.sample_numel());
  train.apply(decode_image(bytes, path), plan, out.data());
  EXPECT_LT(max_abs_diff(out, (*expected)[0]), 1e-6);
}

namespace {

// torchvision's InterpolationMode for a filter.
std::string transforms_mode(Interpolation interpolation) {
  return interpolation == Interpolation::Bicubic ? "T.InterpolationMode.BICUBIC" : "T.InterpolationMode.BILINEAR";
}

class Filters : public ::testing::TestWithParam<Interpolation> {};

}  // namespace

// Many crops at once, from upscales (2 taps per output, 4 for bicubic) to 6x shrinks (13 taps,
// 25 for bicubic, several SIMD groups), flipped or not, decoded whole or only where the taps read
// (where the last outputs of a row sit at the end of the decoded buffer), written to aligned and
// misaligned memory: all equal torchvision's output.
TEST_P(Filters, ManyTrainCropsMatchTorchvision) {
  dpt::testing::TempDir dir;
  const std::string path = dir.path() + "/a.jpg";
  const auto bytes = encode_jpeg(dpt::testing::gradient_image(150, 101, 1), 90);
  write_file(path, bytes);
  Transform train(
      TransformOptions().mode(TransformMode::Train).size(24).seed(7).dct_scaling(false).interpolation(GetParam()));
  constexpr int kCrops = 16;
  std::string crops;
  for (int64_t index = 0; index < kCrops; ++index) {
    const CropPlan p = train.plan(150, 101, 1, index);
    crops += dpt::str("lambda im: (F.hflip if ", p.flip ? "True" : "False", " else (lambda x: x))(F.resized_crop(im, ",
                      p.top, ", ", p.left, ", ", p.height, ", ", p.width, ", [24, 24], ", transforms_mode(GetParam()),
                      ")), ");
  }
  auto expected = torchvision_outputs(path, crops);
  if (!expected) DPT_MISSING_DEPENDENCY(dpt::testing::oracle_missing("torchvision"));
  ASSERT_EQ(expected->size(), static_cast<size_t>(kCrops));
  const Image full = decode_image(bytes, path);
  OffsetBuffer aligned(train.sample_numel(), 0), misaligned(train.sample_numel(), 1);
  std::vector<float> region(train.sample_numel());
  for (int64_t index = 0; index < kCrops; ++index) {
    train.apply(full, 1, index, aligned.data());
    const std::vector<float> whole = aligned.values();
    EXPECT_LT(max_abs_diff(whole, (*expected)[index]), 1e-6) << "crop " << index;
    train.apply(full, 1, index, misaligned.data());
    EXPECT_EQ(misaligned.values(), whole) << "crop " << index;
    train.apply_encoded(bytes, path, 1, index, region.data());
    EXPECT_EQ(region, whole) << "crop " << index;
  }
}

// Resize + CenterCrop with each filter, shrinking (75x50 to 40) and enlarging (to 90).
TEST_P(Filters, EvalResizeMatchesTorchvision) {
  dpt::testing::TempDir dir;
  const std::string path = dir.path() + "/a.jpg";
  const auto bytes = encode_jpeg(dpt::testing::gradient_image(75, 50, 1), 90);
  write_file(path, bytes);
  const std::string mode = transforms_mode(GetParam());
  auto expected = torchvision_outputs(path, dpt::str("T.Compose([T.Resize(40, ", mode, "), T.CenterCrop(32)]), ",
                                                     "T.Compose([T.Resize(90, ", mode, "), T.CenterCrop(80)])"));
  if (!expected) DPT_MISSING_DEPENDENCY(dpt::testing::oracle_missing("torchvision"));
  ASSERT_EQ(expected->size(), 2u);
  const int sizes[2][2] = {{40, 32}, {90, 80}};
  for (int i = 0; i < 2; ++i) {
    Transform eval(
        TransformOptions().resize(sizes[i][0]).size(sizes[i][1]).dct_scaling(false).interpolation(GetParam()));
    std::vector<float> out(eval.sample_numel());
    eval.apply_encoded(bytes, path, 0, 0, out.data());
    EXPECT_LT(max_abs_diff(out, (*expected)[i]), 1e-6) << "resize " << sizes[i][0];
  }
}

INSTANTIATE_TEST_SUITE_P(Transform, Filters, ::testing::Values(Interpolation::Bilinear, Interpolation::Bicubic),
                         [](const auto& info) { return to_string(info.param); });

TEST(Transform, RandomResizedCropFollowsTorchvisionRules) {
  Transform train(TransformOptions().mode(TransformMode::Train).size(32).seed(11));
  int flips = 0;
  for (int64_t i = 0; i < 500; ++i) {
    const CropPlan p = train.plan(300, 200, 2, i);
    ASSERT_GT(p.width, 0);
    ASSERT_GT(p.height, 0);
    ASSERT_LE(p.left + p.width, 300);
    ASSERT_LE(p.top + p.height, 200);
    const double area = static_cast<double>(p.width) * p.height / (300.0 * 200.0);
    EXPECT_GE(area, 0.08 - 0.01);
    const double ratio = static_cast<double>(p.width) / p.height;
    EXPECT_GE(ratio, 0.75 - 0.02);
    EXPECT_LE(ratio, 4.0 / 3.0 + 0.02);
    flips += p.flip;
  }
  EXPECT_GT(flips, 200);
  EXPECT_LT(flips, 300);
  // A 1000x10 strip has no crop within the ratio range: the fallback is the centered 13x10 box.
  const CropPlan fallback = train.plan(1000, 10, 0, 0);
  EXPECT_EQ(fallback.width, 13);
  EXPECT_EQ(fallback.height, 10);
  EXPECT_EQ(fallback.left, (1000 - 13) / 2);
  EXPECT_EQ(fallback.top, 0);
}

TEST(Transform, AugmentationDependsOnlyOnSeedEpochAndIndex) {
  const auto bytes = encode_jpeg(dpt::testing::gradient_image(90, 70), 90);
  Transform a(TransformOptions().mode(TransformMode::Train).size(16).seed(5));
  Transform b(TransformOptions().mode(TransformMode::Train).size(16).seed(5));
  std::vector<float> x(a.sample_numel()), y(a.sample_numel()), z(a.sample_numel());
  a.apply_encoded(bytes, "a.jpg", 3, 42, x.data());
  b.apply_encoded(bytes, "a.jpg", 3, 42, y.data());
  EXPECT_EQ(x, y);
  b.apply_encoded(bytes, "a.jpg", 4, 42, z.data());
  EXPECT_NE(x, z);
}

TEST(Transform, RejectsImpossibleOptions) {
  EXPECT_THROW(Transform(TransformOptions().size(0)), dpt::ConfigError);
  EXPECT_THROW(Transform(TransformOptions().resize(100).size(224)), dpt::ConfigError);
  EXPECT_THROW(Transform(TransformOptions().std({1.0f, 0.0f, 1.0f})), dpt::ConfigError);
}

TEST(Transform, InterpolationNamesAreTorchvisions) {
  for (Interpolation filter : {Interpolation::Bilinear, Interpolation::Bicubic}) {
    EXPECT_EQ(parse_interpolation(to_string(filter)), filter);
  }
  EXPECT_EQ(to_string(Interpolation::Bicubic), "bicubic");
  EXPECT_THROW(parse_interpolation("nearest"), dpt::ConfigError);
}

// RandomErasing after the crop, flip and normalisation: the plan's box zeroed in every channel,
// as torchvision's F.erase(img, i, j, h, w, 0) on the normalised tensor; the box covers 2-33% of
// the output with an aspect ratio within 0.3-3.3, and about half the samples are erased at 0.5.
TEST(Transform, RandomErasingZeroesThePlannedBox) {
  dpt::testing::TempDir dir;
  const std::string path = dir.path() + "/a.jpg";
  const auto bytes = encode_jpeg(dpt::testing::gradient_image(64, 48), 90);
  write_file(path, bytes);
  Transform train(
      TransformOptions().mode(TransformMode::Train).size(24).seed(3).dct_scaling(false).erase_probability(0.5));
  CropPlan plan;
  int erased = 0;
  for (int64_t index = 0; index < 400; ++index) {
    const CropPlan p = train.plan(64, 48, 0, index);
    if (!p.erase) continue;
    ++erased;
    const double fraction = static_cast<double>(p.erase->height * p.erase->width) / (24 * 24);
    EXPECT_GE(fraction, 0.02 * 0.8) << index;  // rounding the sides moves the area a little
    EXPECT_LE(fraction, 0.33 * 1.2) << index;
    EXPECT_LE(p.erase->top + p.erase->height, 24);
    EXPECT_LE(p.erase->left + p.erase->width, 24);
    if (p.flip && !plan.erase) plan = p;
  }
  EXPECT_NEAR(erased / 400.0, 0.5, 0.08);
  ASSERT_TRUE(plan.erase);
  auto expected = torchvision_outputs(
      path, dpt::str("lambda im: F.hflip(F.resized_crop(im, ", plan.top, ", ", plan.left, ", ", plan.height, ", ",
                     plan.width, ", [24, 24]))"));
  if (!expected) DPT_MISSING_DEPENDENCY(dpt::testing::oracle_missing("torchvision"));
  const auto& box = *plan.erase;
  auto& values = (*expected)[0];
  for (int c = 0; c < 3; ++c) {
    for (int y = box.top; y < box.top + box.height; ++y) {
      for (int x = box.left; x < box.left + box.width; ++x) values[(c * 24 + y) * 24 + x] = 0.0;
    }
  }
  std::vector<float> out(train.sample_numel());
  train.apply(decode_image(bytes, path), plan, out.data());
  EXPECT_LT(max_abs_diff(out, values), 1e-6);
  // Erasing draws from a stream of its own: the crops and flips are those without it.
  Transform plain(TransformOptions().mode(TransformMode::Train).size(24).seed(3).dct_scaling(false));
  const CropPlan same = plain.plan(64, 48, 0, 7), with = train.plan(64, 48, 0, 7);
  EXPECT_EQ(std::make_tuple(same.left, same.top, same.width, same.height, same.flip),
            std::make_tuple(with.left, with.top, with.width, with.height, with.flip));
}

// The augmentation path (resize to bytes, augment, normalize) without an op gives the fused
// path's floats exactly, so that an augmented crop differs from a plain one only by its ops.
TEST(Transform, AugmentationPathWithoutOpsEqualsTheFusedPath) {
  const Image image = dpt::testing::gradient_image(120, 90, 2);
  const auto base = TransformOptions().mode(TransformMode::Train).size(48).seed(5);
  Transform fused(base);
  Transform unfused(
      TransformOptions(base).auto_augment(AutoAugmentOptions().policy(AutoAugmentPolicy::RandAugment).num_ops(0)));
  for (int64_t index = 0; index < 6; ++index) {
    std::vector<float> a(fused.sample_numel()), b(unfused.sample_numel());
    fused.apply(image, 1, index, a.data());
    unfused.apply(image, 1, index, b.data());
    EXPECT_EQ(a, b) << "sample " << index;
  }
}

// TrivialAugmentWide keeps each sample's crop, is a function of (seed, epoch, index), and
// changes across epochs and repeated copies (another epoch key).
TEST(Transform, AutoAugmentIsKeyedBySampleAndLeavesTheCrop) {
  const Image image = dpt::testing::gradient_image(120, 90, 2);
  const auto base = TransformOptions().mode(TransformMode::Train).size(40).seed(8);
  Transform plain(base);
  Transform augmented(
      TransformOptions(base).auto_augment(AutoAugmentOptions().policy(AutoAugmentPolicy::TrivialAugmentWide)));
  int changed = 0;
  for (int64_t index = 0; index < 20; ++index) {
    const CropPlan p = plain.plan(120, 90, 3, index), q = augmented.plan(120, 90, 3, index);
    EXPECT_EQ(std::tie(p.left, p.top, p.width, p.height, p.flip), std::tie(q.left, q.top, q.width, q.height, q.flip));
    std::vector<float> a(plain.sample_numel()), b(plain.sample_numel()), c(plain.sample_numel());
    std::vector<float> other_copy(plain.sample_numel());
    plain.apply(image, 3, index, a.data());
    augmented.apply(image, 3, index, b.data());
    augmented.apply(image, 3, index, c.data());
    augmented.apply(image, 3 + (int64_t{1} << 32), index, other_copy.data());
    EXPECT_EQ(b, c) << "sample " << index;
    changed += a != b;
    changed += b != other_copy;
  }
  // Identity is one op in 14, and a few ops at their smallest bin leave the bytes alone.
  EXPECT_GT(changed, 30);
}
