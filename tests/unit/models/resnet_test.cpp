#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <string>
#include <vector>

#include <torch/torch.h>

#include "dptrain/common/error.h"
#include "dptrain/models/resnet.h"
#include "dptrain/models/state_dict.h"

namespace models = dpt::models;

namespace {

int64_t parameter_count(const torch::nn::Module& module) {
  int64_t total = 0;
  for (const auto& p : module.parameters()) total += p.numel();
  return total;
}

std::vector<std::string> first_keys(const models::StateDict& dict, size_t n) {
  std::vector<std::string> keys = dict.keys();
  keys.resize(std::min(n, keys.size()));
  return keys;
}

}  // namespace

// Counts from torchvision 0.14 (sum of p.numel() over parameters(); len(state_dict())).
TEST(ResNet, ParameterAndEntryCountsMatchTorchvision) {
  struct Case {
    models::ResNet (*make)(const models::ResNetOptions&);
    int64_t parameters;
    size_t entries;
  };
  const std::vector<Case> cases = {{models::resnet18, 11689512, 122}, {models::resnet34, 21797672, 218},
                                   {models::resnet50, 25557032, 320}, {models::resnet101, 44549160, 626},
                                   {models::resnet152, 60192808, 932}};
  for (const auto& c : cases) {
    auto model = c.make(models::ResNetOptions());
    EXPECT_EQ(parameter_count(*model), c.parameters);
    EXPECT_EQ(models::state_dict(*model).size(), c.entries);
  }
}

// He et al. 2015, table 6: ResNet-20 0.27M, ResNet-56 0.85M parameters (option A shortcuts).
TEST(ResNet, CifarParameterCounts) {
  auto options = models::ResNetOptions().num_classes(10);
  EXPECT_EQ(parameter_count(*models::resnet20(options)), 269722);
  EXPECT_EQ(parameter_count(*models::resnet56(options)), 853018);
  // 19 convolutions, 19 batch norms of 5 entries each, fc weight and bias; no shortcut keys.
  auto dict = models::state_dict(*models::resnet20(options));
  EXPECT_EQ(dict.size(), 19u + 19u * 5u + 2u);
  for (const auto& key : dict.keys()) EXPECT_EQ(key.find("downsample"), std::string::npos) << key;
  EXPECT_EQ(dict["conv1.weight"].sizes(), (std::vector<int64_t>{16, 3, 3, 3}));
  EXPECT_EQ(dict["layer3.2.conv2.weight"].sizes(), (std::vector<int64_t>{64, 64, 3, 3}));
  EXPECT_EQ(dict["fc.weight"].sizes(), (std::vector<int64_t>{10, 64}));
}

TEST(ResNet, InvalidShapesAreConfigErrors) {
  EXPECT_THROW(models::cifar_resnet(21), dpt::ConfigError);
  EXPECT_THROW(models::ResNet(models::ResNetLayout().widths({64, 128}), models::ResNetOptions()), dpt::ConfigError);
  EXPECT_THROW(models::resnet18(models::ResNetOptions().num_classes(0)), dpt::ConfigError);
  EXPECT_EQ(models::state_dict(*models::cifar_resnet(8)).size(), 7u + 7u * 5u + 2u);
}

TEST(ResNet, Resnet18KeysFollowTorchvisionOrder) {
  auto dict = models::state_dict(*models::resnet18(models::ResNetOptions().num_classes(10)));
  const std::vector<std::string> head = {
      "conv1.weight", "bn1.weight", "bn1.bias", "bn1.running_mean", "bn1.running_var",
      "bn1.num_batches_tracked", "layer1.0.conv1.weight", "layer1.0.bn1.weight",
      "layer1.0.bn1.bias", "layer1.0.bn1.running_mean", "layer1.0.bn1.running_var",
      "layer1.0.bn1.num_batches_tracked", "layer1.0.conv2.weight"};
  EXPECT_EQ(first_keys(dict, head.size()), head);
  const auto keys = dict.keys();
  EXPECT_EQ(keys[keys.size() - 2], "fc.weight");
  EXPECT_EQ(keys.back(), "fc.bias");
  // Stage 2 opens with a strided block whose projection follows its second batch norm.
  auto at = [&](const std::string& key) { return std::find(keys.begin(), keys.end(), key) - keys.begin(); };
  EXPECT_EQ(at("layer2.0.downsample.0.weight"), at("layer2.0.bn2.num_batches_tracked") + 1);
  EXPECT_EQ(at("layer2.0.downsample.1.running_var"), at("layer2.0.downsample.0.weight") + 4);
  EXPECT_FALSE(dict.contains("layer1.0.downsample.0.weight"));
  EXPECT_EQ(dict["layer4.1.conv2.weight"].sizes(), (std::vector<int64_t>{512, 512, 3, 3}));
  EXPECT_EQ(dict["bn1.num_batches_tracked"].scalar_type(), torch::kLong);
  EXPECT_EQ(dict["fc.weight"].sizes(), (std::vector<int64_t>{10, 512}));
}

TEST(ResNet, Resnet50BottleneckKeysAndShapes) {
  auto dict = models::state_dict(*models::resnet50());
  EXPECT_EQ(dict["layer1.0.conv1.weight"].sizes(), (std::vector<int64_t>{64, 64, 1, 1}));
  EXPECT_EQ(dict["layer1.0.conv3.weight"].sizes(), (std::vector<int64_t>{256, 64, 1, 1}));
  EXPECT_EQ(dict["layer1.0.downsample.0.weight"].sizes(), (std::vector<int64_t>{256, 64, 1, 1}));
  EXPECT_EQ(dict["layer1.0.downsample.1.running_var"].sizes(), (std::vector<int64_t>{256}));
  // v1.5: the stride sits on the 3x3 convolution, so stage 2's first conv1 is still 1x1 on 256.
  EXPECT_EQ(dict["layer2.0.conv1.weight"].sizes(), (std::vector<int64_t>{128, 256, 1, 1}));
  EXPECT_EQ(dict["layer2.0.conv2.weight"].sizes(), (std::vector<int64_t>{128, 128, 3, 3}));
  EXPECT_FALSE(dict.contains("layer1.1.downsample.0.weight"));
  EXPECT_EQ(dict["fc.weight"].sizes(), (std::vector<int64_t>{1000, 2048}));
}

TEST(ResNet, OutputShapes) {
  torch::manual_seed(0);
  auto options = models::ResNetOptions().num_classes(10);
  EXPECT_EQ(models::resnet18(options)(torch::randn({2, 3, 64, 64})).sizes(), (std::vector<int64_t>{2, 10}));
  EXPECT_EQ(models::resnet50(models::ResNetOptions().num_classes(7))(torch::randn({2, 3, 32, 32})).sizes(),
            (std::vector<int64_t>{2, 7}));
  EXPECT_EQ(models::resnet20(options)(torch::randn({2, 3, 32, 32})).sizes(), (std::vector<int64_t>{2, 10}));
}

TEST(ResNet, InitialisationFollowsTorchvision) {
  torch::manual_seed(0);
  auto dict = models::state_dict(*models::resnet18());
  // Kaiming normal, fan_out, ReLU gain: std = sqrt(2 / (64 * 7 * 7)) for the stem.
  const double expected_std = std::sqrt(2.0 / (64 * 7 * 7));
  EXPECT_NEAR(dict["conv1.weight"].std().item<double>(), expected_std, 0.05 * expected_std);
  EXPECT_NEAR(dict["conv1.weight"].mean().item<double>(), 0.0, 0.05 * expected_std);
  const double block_std = std::sqrt(2.0 / (512 * 3 * 3));
  EXPECT_NEAR(dict["layer4.1.conv2.weight"].std().item<double>(), block_std, 0.02 * block_std);
  EXPECT_TRUE(dict["layer3.0.bn1.weight"].eq(1).all().item<bool>());
  EXPECT_TRUE(dict["layer3.0.bn1.bias"].eq(0).all().item<bool>());
  EXPECT_FALSE(dict["layer1.0.bn2.weight"].eq(0).any().item<bool>());
  // LibTorch's default Linear: uniform within 1/sqrt(fan_in).
  EXPECT_LE(dict["fc.weight"].abs().max().item<double>(), 1.0 / std::sqrt(512.0));
  EXPECT_LE(dict["fc.bias"].abs().max().item<double>(), 1.0 / std::sqrt(512.0));
}

TEST(ResNet, ZeroInitResidualZeroesEachBranchsLastNorm) {
  auto basic = models::state_dict(*models::resnet18(models::ResNetOptions().zero_init_residual(true)));
  EXPECT_TRUE(basic["layer1.0.bn2.weight"].eq(0).all().item<bool>());
  EXPECT_TRUE(basic["layer4.1.bn2.weight"].eq(0).all().item<bool>());
  EXPECT_TRUE(basic["layer1.0.bn1.weight"].eq(1).all().item<bool>());
  EXPECT_TRUE(basic["layer2.0.downsample.1.weight"].eq(1).all().item<bool>());
  EXPECT_TRUE(basic["bn1.weight"].eq(1).all().item<bool>());
  auto bottleneck = models::state_dict(*models::resnet50(models::ResNetOptions().zero_init_residual(true)));
  EXPECT_TRUE(bottleneck["layer3.5.bn3.weight"].eq(0).all().item<bool>());
  EXPECT_TRUE(bottleneck["layer3.5.bn2.weight"].eq(1).all().item<bool>());
}

TEST(ResNet, CloneIsADeepCopy) {
  torch::manual_seed(0);
  auto model = models::resnet20(models::ResNetOptions().num_classes(10));
  auto copy = std::dynamic_pointer_cast<models::ResNetImpl>(model->clone());
  ASSERT_NE(copy, nullptr);
  auto original = models::state_dict(*model);
  auto cloned = models::state_dict(*copy);
  ASSERT_EQ(cloned.keys(), original.keys());
  for (const auto& entry : original) {
    EXPECT_TRUE(torch::equal(entry.value(), cloned[entry.key()])) << entry.key();
    EXPECT_NE(entry.value().data_ptr(), cloned[entry.key()].data_ptr()) << entry.key();
  }
  model->eval();
  copy->eval();
  auto x = torch::randn({2, 3, 16, 16});
  EXPECT_TRUE(torch::equal(model(x), copy->forward(x)));
}

TEST(ResNet, NormLayerFactoryReplacesEveryNorm) {
  auto group_norm = [](int64_t channels) {
    return torch::nn::AnyModule(torch::nn::GroupNorm(torch::nn::GroupNormOptions(4, channels)));
  };
  auto model = models::resnet18(models::ResNetOptions().num_classes(3).norm_layer(group_norm));
  auto dict = models::state_dict(*model);
  EXPECT_TRUE(dict.contains("layer2.0.downsample.1.weight"));
  EXPECT_FALSE(dict.contains("bn1.running_mean"));
  EXPECT_EQ(dict.size(), 122u - 20u * 3u);  // 20 norms without running stats
  EXPECT_EQ(model(torch::randn({1, 3, 32, 32})).sizes(), (std::vector<int64_t>{1, 3}));
}
