#include <gtest/gtest.h>

#include <string>
#include <vector>

#include <torch/torch.h>

#include "dptrain/common/error.h"
#include "dptrain/models/blocks.h"
#include "dptrain/models/state_dict.h"

namespace models = dpt::models;

TEST(Blocks, BasicBlockWithProjection) {
  models::BasicBlock block(models::BlockOptions(8, 16).stride(2));
  auto dict = models::state_dict(*block);
  const std::vector<std::string> keys = {
      "conv1.weight", "bn1.weight", "bn1.bias", "bn1.running_mean", "bn1.running_var",
      "bn1.num_batches_tracked", "conv2.weight", "bn2.weight", "bn2.bias", "bn2.running_mean",
      "bn2.running_var", "bn2.num_batches_tracked", "downsample.0.weight", "downsample.1.weight",
      "downsample.1.bias", "downsample.1.running_mean", "downsample.1.running_var",
      "downsample.1.num_batches_tracked"};
  EXPECT_EQ(dict.keys(), keys);
  EXPECT_EQ(dict["downsample.0.weight"].sizes(), (std::vector<int64_t>{16, 8, 1, 1}));
  EXPECT_EQ(block(torch::randn({2, 8, 8, 8})).sizes(), (std::vector<int64_t>{2, 16, 4, 4}));
}

TEST(Blocks, BottleneckExpandsByFour) {
  models::Bottleneck block(models::BlockOptions(16, 4));
  auto dict = models::state_dict(*block);
  EXPECT_EQ(dict["conv3.weight"].sizes(), (std::vector<int64_t>{16, 4, 1, 1}));
  EXPECT_FALSE(dict.contains("downsample.0.weight"));  // 16 in, 4 * 4 out, stride 1: identity
  EXPECT_EQ(block(torch::randn({2, 16, 5, 5})).sizes(), (std::vector<int64_t>{2, 16, 5, 5}));
}

TEST(Blocks, ZeroPadShortcutSubsamplesAndPadsChannels) {
  auto x = torch::arange(32, torch::kFloat).reshape({1, 2, 4, 4});
  auto y = models::ZeroPadShortcut(2, 4)(x);
  ASSERT_EQ(y.sizes(), (std::vector<int64_t>{1, 4, 2, 2}));
  EXPECT_TRUE(y[0][0].eq(0).all().item<bool>());
  EXPECT_TRUE(y[0][3].eq(0).all().item<bool>());
  EXPECT_TRUE(torch::equal(y[0][1], torch::tensor({0.f, 2.f, 8.f, 10.f}).reshape({2, 2})));
  EXPECT_TRUE(torch::equal(y[0][2], torch::tensor({16.f, 18.f, 24.f, 26.f}).reshape({2, 2})));
}

TEST(Blocks, ZeroPadShortcutHasNoKeysAndCannotDropChannels) {
  models::BasicBlock block(models::BlockOptions(16, 32).stride(2).shortcut(models::Shortcut::ZeroPad));
  EXPECT_EQ(models::state_dict(*block).size(), 12u);
  try {
    models::Bottleneck(models::BlockOptions(256, 32).shortcut(models::Shortcut::ZeroPad));
    FAIL() << "expected ConfigError";
  } catch (const dpt::ConfigError& error) {
    EXPECT_STREQ(error.what(),
                 "a ZeroPad shortcut can only add channels, but the block maps 256 channels to 128; use "
                 "Shortcut::Projection");
  }
}
