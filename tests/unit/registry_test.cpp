#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "dptrain/common/error.h"
#include "dptrain/models/registry.h"
#include "dptrain/models/state_dict.h"

namespace models = dpt::models;

TEST(ModelRegistry, Names) {
  EXPECT_EQ(models::names(), (std::vector<std::string>{"resnet18", "resnet34", "resnet50", "resnet101",
                                                       "resnet152", "resnet20", "resnet56"}));
}

TEST(ModelRegistry, CreatesWithOptions) {
  auto dict = models::state_dict(*models::create("resnet50", models::ResNetOptions().num_classes(5)));
  EXPECT_EQ(dict["fc.weight"].sizes(), (std::vector<int64_t>{5, 2048}));
  auto cifar = models::state_dict(*models::create("resnet20", models::ResNetOptions().num_classes(10)));
  EXPECT_EQ(cifar["fc.weight"].sizes(), (std::vector<int64_t>{10, 64}));
}

TEST(ModelRegistry, UnknownNameListsTheKnownOnes) {
  try {
    models::create("ResNet18");
    FAIL() << "expected ConfigError";
  } catch (const dpt::ConfigError& error) {
    EXPECT_STREQ(error.what(),
                 "unknown model architecture 'ResNet18'; choose one of: resnet18, resnet34, resnet50, "
                 "resnet101, resnet152, resnet20, resnet56");
  }
}
