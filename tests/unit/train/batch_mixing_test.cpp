#include "dptrain/train/batch_mixing.h"

#include <gtest/gtest.h>

#include <torch/torch.h>

#include <string>
#include <vector>

#include "dptrain/common/error.h"
#include "support/python_oracle.h"

using namespace dpt::train;

namespace {

constexpr int64_t kClasses = 5;

// A batch both languages build alike: 4 images of 3 x 6 x 8, values exact in float32.
at::Tensor test_batch() {
  return (torch::arange(4 * 3 * 6 * 8) % 17).to(at::kFloat).div(16).sub(0.5).reshape({4, 3, 6, 8});
}

at::Tensor test_labels() { return torch::tensor({1, 3, 0, 2}, at::kLong); }

// Logits of a mixed batch for the loss check: any function of the images both sides compute alike.
at::Tensor test_logits(const at::Tensor& images) { return images.flatten(1).narrow(1, 0, kClasses).mul(3); }

// torchvision's references (RandomMixup, RandomCutmix, then the recipe's criterion with label
// smoothing 0.1) on the same batch with the draws given instead of drawn: per case, the mixed
// images, the targets and the loss, one line each.
const char* kReference = R"(
import math, torch
x = ((torch.arange(4 * 3 * 6 * 8) % 17).float() / 16 - 0.5).reshape(4, 3, 6, 8)
y = torch.tensor([1, 3, 0, 2])

def mixed(batch, target, lam, cutmix, r_x, r_y):
    batch = batch.clone()
    target = torch.nn.functional.one_hot(target, num_classes=5).to(dtype=batch.dtype)
    batch_rolled, target_rolled = batch.roll(1, 0), target.roll(1, 0)
    if cutmix:
        H, W = batch.shape[-2:]
        r = 0.5 * math.sqrt(1.0 - lam)
        r_w_half, r_h_half = int(r * W), int(r * H)
        x1 = int(torch.clamp(torch.tensor(r_x) - r_w_half, min=0))
        y1 = int(torch.clamp(torch.tensor(r_y) - r_h_half, min=0))
        x2 = int(torch.clamp(torch.tensor(r_x) + r_w_half, max=W))
        y2 = int(torch.clamp(torch.tensor(r_y) + r_h_half, max=H))
        batch[:, :, y1:y2, x1:x2] = batch_rolled[:, :, y1:y2, x1:x2]
        lam = float(1.0 - (x2 - x1) * (y2 - y1) / (W * H))
    else:
        batch_rolled.mul_(1.0 - lam)
        batch.mul_(lam).add_(batch_rolled)
    target_rolled.mul_(1.0 - lam)
    target.mul_(lam).add_(target_rolled)
    return batch, target

for lam, cutmix, r_x, r_y in CASES:
    batch, target = mixed(x, y, lam, cutmix, r_x, r_y)
    loss = torch.nn.functional.cross_entropy(batch.flatten(1)[:, :5] * 3, target, label_smoothing=0.1)
    for t in (batch, target, loss.reshape(1)):
        print(" ".join(repr(v) for v in t.flatten().tolist()))
)";

std::vector<MixDraw> cases() {
  return {{false, 0.3, 0, 0}, {false, 0.93, 0, 0}, {true, 0.6, 5, 2}, {true, 0.2, 0, 5}, {true, 0.05, 7, 0}};
}

std::string python_cases() {
  std::string text = "CASES = [";
  for (const auto& d : cases()) {
    text += dpt::str("(", d.lambda, ", ", d.cutmix ? "True" : "False", ", ", d.center_x, ", ", d.center_y, "), ");
  }
  return text + "]\n";
}

std::vector<double> values(const at::Tensor& t) {
  const at::Tensor flat = t.to(at::kDouble).flatten().contiguous();
  return {flat.data_ptr<double>(), flat.data_ptr<double>() + flat.numel()};
}

}  // namespace

// Mixup (weights 0.3, 0.93) and cutmix boxes inside the image and clipped at each border give
// torchvision's mixed images and targets, and its loss with label smoothing.
TEST(BatchMixing, MatchesTorchvisionsReferenceForTheSameDraws) {
  auto out = dpt::testing::run_python(python_cases() + kReference);
  if (!out) DPT_MISSING_DEPENDENCY(dpt::testing::oracle_missing("torch"));
  const auto expected = dpt::testing::parse_lines<double>(*out);
  ASSERT_EQ(expected.size(), 3 * cases().size());
  BatchMixing mixing(BatchMixingOptions().mixup_alpha(0.2).cutmix_alpha(1.0), kClasses);
  namespace F = torch::nn::functional;
  for (size_t c = 0; c < cases().size(); ++c) {
    at::Tensor images = test_batch();
    const at::Tensor targets = mixing.apply(images, test_labels(), cases()[c]);
    const at::Tensor loss =
        F::cross_entropy(test_logits(images), targets, F::CrossEntropyFuncOptions().label_smoothing(0.1));
    EXPECT_EQ(values(images), expected[3 * c]) << "case " << c;
    EXPECT_EQ(values(targets), expected[3 * c + 1]) << "case " << c;
    EXPECT_NEAR(loss.item<double>(), expected[3 * c + 2][0], 1e-6) << "case " << c;
  }
}

TEST(BatchMixing, CutmixBoxIsClippedAndWeighsTheRest) {
  // r = 0.5 sqrt(0.36) = 0.3: half-sides int(0.3 * 8) = 2 and int(0.3 * 6) = 1 around (0, 5).
  const CutmixBox box = cutmix_box({true, 0.64, 0, 5}, 6, 8);
  EXPECT_EQ(box.x1, 0);
  EXPECT_EQ(box.x2, 2);
  EXPECT_EQ(box.y1, 4);
  EXPECT_EQ(box.y2, 6);
  EXPECT_DOUBLE_EQ(box.lambda, 1.0 - 4.0 / 48.0);
}

// The draws depend on the stream's key only; with both enabled, each batch picks one of the two
// evenly, and lambda follows Beta(alpha, alpha) (mean 1/2, variance 1 / (4 (2 alpha + 1))).
TEST(BatchMixing, DrawsAreKeyedAndFollowTheirDistributions) {
  BatchMixing mixing(BatchMixingOptions().mixup_alpha(0.2).cutmix_alpha(1.0), kClasses);
  dpt::data::SampleRng a(3, 1, 7), b(3, 1, 7);
  const MixDraw first = mixing.draw(a, 6, 8), again = mixing.draw(b, 6, 8);
  EXPECT_EQ(first.cutmix, again.cutmix);
  EXPECT_EQ(first.lambda, again.lambda);
  EXPECT_EQ(first.center_x, again.center_x);
  constexpr int kDraws = 4000;
  int cutmixes = 0;
  double mixup_sum = 0, mixup_square_sum = 0;
  for (int i = 0; i < kDraws; ++i) {
    dpt::data::SampleRng rng(3, 0, i);
    const MixDraw d = mixing.draw(rng, 6, 8);
    ASSERT_GE(d.lambda, 0.0);
    ASSERT_LE(d.lambda, 1.0);
    if (d.cutmix) {
      ++cutmixes;
      ASSERT_GE(d.center_x, 0);
      ASSERT_LT(d.center_x, 8);
      ASSERT_LT(d.center_y, 6);
    } else {
      mixup_sum += d.lambda;
      mixup_square_sum += d.lambda * d.lambda;
    }
  }
  const int mixups = kDraws - cutmixes;
  EXPECT_NEAR(static_cast<double>(cutmixes) / kDraws, 0.5, 0.04);
  const double mean = mixup_sum / mixups, variance = mixup_square_sum / mixups - mean * mean;
  EXPECT_NEAR(mean, 0.5, 0.03);
  EXPECT_NEAR(variance, 1.0 / (4 * (2 * 0.2 + 1)), 0.02);  // 0.179: most draws near 0 or 1
}

TEST(BatchMixing, OnlyTheEnabledOneIsDrawnAndNegativeAlphasAreRefused) {
  BatchMixing mixup(BatchMixingOptions().mixup_alpha(0.2), kClasses);
  for (int i = 0; i < 50; ++i) {
    dpt::data::SampleRng rng(0, 0, i);
    EXPECT_FALSE(mixup.draw(rng, 6, 8).cutmix);
  }
  EXPECT_FALSE(BatchMixing(BatchMixingOptions(), kClasses).enabled());
  EXPECT_THROW(BatchMixing(BatchMixingOptions().cutmix_alpha(-1), kClasses), dpt::ConfigError);
}
