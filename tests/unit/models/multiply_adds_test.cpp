// Multiply-add counts: exact for single operations, and the zoo's against the counts torchvision
// publishes for its weights ("GFLOPS", which are multiply-adds, rounded to two decimals).

#include <gtest/gtest.h>

#include <cmath>
#include <string>

#include <torch/torch.h>

#include "dptrain/compat/compat.h"
#include "dptrain/models/multiply_adds.h"
#include "dptrain/models/registry.h"

namespace models = dpt::models;

namespace {

template <typename Run>
double count(Run run) {
  torch::NoGradGuard no_grad;
  models::MultiplyAddCounter counter;
  run();
  return counter.total();
}

TEST(MultiplyAddCounter, CountsAConvolutionByItsOutputsAndGroups) {
  // 32 -> 64 channels in 4 groups, 3x3, stride 2, padding 1, dilation 2, on 2 x 32 x 17 x 20:
  // outputs (17 + 2 - 5) / 2 + 1 = 8 by (20 + 2 - 5) / 2 + 1 = 9, each 8 x 3 x 3 products.
  torch::nn::Conv2d conv(torch::nn::Conv2dOptions(32, 64, 3).stride(2).padding(1).dilation(2).groups(4));
  const auto input = torch::randn({2, 32, 17, 20});
  EXPECT_EQ(count([&] { conv(input); }), 2.0 * 64 * 8 * 9 * (8 * 3 * 3));
  // Its output really has that shape: the count follows what ran.
  EXPECT_EQ(conv(input).sizes(), (std::vector<int64_t>{2, 64, 8, 9}));

  // Transposed: each input element takes out_channels/groups x kernel products.
  torch::nn::ConvTranspose2d up(torch::nn::ConvTranspose2dOptions(16, 8, 2).stride(2));
  EXPECT_EQ(count([&] { up(torch::randn({1, 16, 5, 5})); }), 16.0 * 5 * 5 * (8 * 2 * 2));
}

TEST(MultiplyAddCounter, CountsMatrixProductsAndAttentionOnce) {
  torch::nn::Linear linear(48, 10);
  EXPECT_EQ(count([&] { linear(torch::randn({6, 48})); }), 6.0 * 48 * 10);
  // Tokens through a linear layer, and a batched product.
  EXPECT_EQ(count([&] { linear(torch::randn({2, 7, 48})); }), 2.0 * 7 * 48 * 10);
  EXPECT_EQ(count([&] { torch::bmm(torch::randn({3, 4, 5}), torch::randn({3, 5, 6})); }), 3.0 * 4 * 5 * 6);
  // Attention over 2 x 3 heads, 10 queries, 12 keys, 8 dimensions: scores and weighted values,
  // whichever kernels LibTorch runs inside (1.13: batched products; 2.x: a fused kernel).
  const auto q = torch::randn({2, 3, 10, 8}), k = torch::randn({2, 3, 12, 8}), v = torch::randn({2, 3, 12, 8});
  EXPECT_EQ(count([&] { dpt::compat::scaled_dot_product_attention(q, k, v, 0.0); }), 2.0 * 3 * (10 * 12 * 8) * 2);
  // Elementwise work is not counted.
  EXPECT_EQ(count([&] { torch::relu(torch::randn({100})).sum(); }), 0.0);
}

// torchvision's published counts at 224 px (torchvision.models docs, "GFLOPS").
struct Published {
  const char* arch;
  double gmacs;
};

TEST(ForwardMultiplyAdds, MatchTorchvisionsPublishedCounts) {
  for (const Published p : {Published{"resnet18", 1.81}, Published{"resnet50", 4.09},
                            Published{"mobilenet_v2", 0.30}, Published{"vit_b_32", 4.41}}) {
    auto model = models::create(p.arch);
    const double gmacs = models::forward_multiply_adds(model, 224) / 1e9;
    // Two decimals published: the count rounds to them.
    EXPECT_NEAR(gmacs, p.gmacs, 0.005) << p.arch;
    EXPECT_TRUE(model->is_training()) << p.arch << ": the model's mode is restored";
    if (std::string(p.arch) == "vit_b_32") {
      // The tolerance sees a count that leaves out attention: 12 layers x 12 heads of 50 x 50
      // scores and weighted values over 64 dimensions.
      const double attention = 12.0 * 12 * 2 * 50 * 50 * 64 / 1e9;
      EXPECT_GT(std::abs(gmacs - attention - p.gmacs), 0.005);
    }
  }
}

}  // namespace
