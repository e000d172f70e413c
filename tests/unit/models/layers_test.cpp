#include "dptrain/models/layers.h"

#include <gtest/gtest.h>

#include <torch/torch.h>

namespace {

struct Moments {
  double min, max, mean, std;
};

Moments truncated_sample(double std, double a, double b) {
  torch::manual_seed(0);
  auto t = torch::empty({1 << 20}, torch::kDouble);
  dpt::models::trunc_normal_(t, std, a, b);
  return {t.min().item<double>(), t.max().item<double>(), t.mean().item<double>(), t.std().item<double>()};
}

}  // namespace

// The truncated normal's moments (numerical integration of the density over [a, b]). A million
// samples estimate the mean and std to about 0.001; the wrong answers a tolerance of 0.005 must
// reject are the untruncated normal and a normal clamped to the bounds (std 0.959 at +-2, 0.430
// at +-0.5, mean 0.083 on [-1, 3]).
TEST(TruncNormal, WideBoundsDrawTheTruncatedDistribution) {
  const Moments m = truncated_sample(1.0, -2, 2);  // 95% inside: drawn by rejection
  EXPECT_GE(m.min, -2.0);
  EXPECT_LE(m.max, 2.0);
  EXPECT_GT(m.max, 1.99) << "the tails reach the bounds";
  EXPECT_NEAR(m.mean, 0.0, 0.005);
  EXPECT_NEAR(m.std, 0.8796, 0.005);
}

TEST(TruncNormal, NarrowBoundsDrawTheTruncatedDistribution) {
  const Moments m = truncated_sample(1.0, -0.5, 0.5);  // 38% inside: by the inverse CDF
  EXPECT_GE(m.min, -0.5);
  EXPECT_LE(m.max, 0.5);
  EXPECT_NEAR(m.std, 0.2839, 0.005);
}

TEST(TruncNormal, AsymmetricBoundsShiftTheMean) {
  const Moments m = truncated_sample(1.0, -1, 3);
  EXPECT_GE(m.min, -1.0);
  EXPECT_LE(m.max, 3.0);
  EXPECT_NEAR(m.mean, 0.2828, 0.005);
  EXPECT_NEAR(m.std, 0.7849, 0.005);
}

TEST(TruncNormal, TheModelsScaleIsAPlainNormalInPractice) {
  const Moments m = truncated_sample(0.02, -2, 2);  // bounds at 100 std
  EXPECT_NEAR(m.std, 0.02, 1e-4);
}
