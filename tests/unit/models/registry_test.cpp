// The model registry and the Classifier over it: names, torchvision's evaluation defaults,
// options reaching the families, and the properties the parallel front ends rely on (the
// network's own names, independent clones, train()/eval() reaching the network).

#include <gtest/gtest.h>

#include <algorithm>
#include <set>
#include <string>
#include <vector>

#include <torch/torch.h>

#include "dptrain/common/error.h"
#include "dptrain/models/registry.h"
#include "dptrain/models/state_dict.h"

#include "support/error_of.h"

namespace models = dpt::models;

using dpt::testing::error_of;

namespace {

std::vector<std::string> keys_of(const torch::nn::Module& module) {
  std::vector<std::string> keys;
  for (const auto& entry : models::state_dict(module)) keys.push_back(entry.key());
  return keys;
}

}  // namespace

TEST(ModelRegistry, NamesAreTorchvisionsAndUnique) {
  const auto names = models::names();
  EXPECT_EQ(std::set<std::string>(names.begin(), names.end()).size(), names.size());
  for (const char* name : {"alexnet", "vgg11", "vgg19_bn", "resnet18", "resnet152", "resnext50_32x4d",
                           "resnext101_64x4d", "wide_resnet101_2", "squeezenet1_1", "mobilenet_v2",
                           "mobilenet_v3_small", "mobilenet_v3_large", "efficientnet_b0", "efficientnet_b7",
                           "efficientnet_v2_l", "vit_b_16", "vit_b_32", "vit_ti_16", "resnet20", "resnet56"}) {
    EXPECT_NE(std::find(names.begin(), names.end(), name), names.end()) << name;
  }
  EXPECT_EQ(models::registry().size(), names.size());
}

TEST(ModelRegistry, EvaluationDefaultsFollowTorchvisionsWeights) {
  EXPECT_EQ(models::info("resnet18").resize_size, 256);
  EXPECT_EQ(models::info("resnet50").resize_size, 232);
  const auto b3 = models::info("efficientnet_b3");
  EXPECT_EQ(b3.crop_size, 300);
  EXPECT_EQ(b3.resize_size, 320);
  EXPECT_EQ(b3.interpolation, dpt::data::Interpolation::Bicubic);
  EXPECT_TRUE(models::info("efficientnet_v2_l").half_normalization);
  EXPECT_EQ(models::info("vit_h_14").crop_size, 518);
  EXPECT_EQ(models::info("torchscript:net.pt").family, "TorchScript");
}

TEST(ModelRegistry, CreatesWithOptions) {
  auto dict = models::state_dict(*models::create("resnet50", models::ClassifierOptions().num_classes(5)));
  EXPECT_EQ(dict["fc.weight"].sizes(), (std::vector<int64_t>{5, 2048}));
  auto mobilenet = models::state_dict(*models::create("mobilenet_v2", models::ClassifierOptions().num_classes(5)));
  EXPECT_EQ(mobilenet["classifier.1.weight"].sizes(), (std::vector<int64_t>{5, 1280}));
  // 64 / 32 = 2 patches a side: 4 patches and the class token.
  auto vit = models::state_dict(*models::create("vit_b_32", models::ClassifierOptions().num_classes(5).image_size(64)));
  EXPECT_EQ(vit["encoder.pos_embedding"].sizes(), (std::vector<int64_t>{1, 5, 768}));
}

TEST(ModelRegistry, UnknownNameListsTheKnownOnes) {
  const auto message = error_of<dpt::ConfigError>([] { models::create("ResNet18"); });
  EXPECT_EQ(message.rfind("unknown model architecture 'ResNet18'; choose one of: alexnet, resnet18, resnet34, ", 0), 0u)
      << message;
  const std::string tail = ", or torchscript:PATH for a module saved with torch.jit.script or torch.jit.trace";
  EXPECT_EQ(message.substr(message.size() - tail.size()), tail);
}

TEST(ModelRegistry, MissingTorchScriptFileSaysHowToMakeOne) {
  const auto message = error_of<dpt::ConfigError>([] { models::create("torchscript:/nonexistent/net.pt"); });
  EXPECT_EQ(message.rfind("cannot load the TorchScript model '/nonexistent/net.pt': ", 0), 0u) << message;
  EXPECT_NE(message.find("save it from Python with torch.jit.script(model).save(path)"), std::string::npos);
}

TEST(Classifier, CarriesTheNetworksOwnNames) {
  auto model = models::create("mobilenet_v3_small", models::ClassifierOptions().num_classes(3));
  EXPECT_EQ(keys_of(*model), keys_of(model->network()));
  EXPECT_EQ(keys_of(*model).front(), "features.0.0.weight");
}

TEST(Classifier, ClonesAreEqualAndIndependent) {
  for (const char* arch : {"efficientnet_b0", "vit_b_32", "squeezenet1_1", "densenet121", "shufflenet_v2_x0_5", "ghostnet"}) {
    SCOPED_TRACE(arch);
    torch::manual_seed(0);
    auto model = models::create(arch, models::ClassifierOptions().num_classes(3).image_size(64));
    auto copy = models::Classifier(std::dynamic_pointer_cast<models::ClassifierImpl>(model->clone()));
    EXPECT_EQ(keys_of(*copy), keys_of(*model));  // DenseNet's named children keep their names
    auto input = torch::randn({2, 3, 64, 64});
    model->eval();
    copy->eval();
    torch::NoGradGuard no_grad;
    EXPECT_TRUE(torch::equal(model(input), copy(input)));
    copy->parameters().front().add_(1);
    EXPECT_FALSE(torch::equal(model->parameters().front(), copy->parameters().front()));
  }
}

TEST(Classifier, DropoutOptionTurnsEveryDropoutOff) {
  // In training mode, batch norm uses the batch's statistics, which are the same for the same
  // input: two forwards differ only through dropout and stochastic depth.
  auto twice_equal = [](models::ClassifierOptions options) {
    torch::manual_seed(0);
    auto model = models::create("efficientnet_b0", options.num_classes(4));
    auto input = torch::randn({4, 3, 32, 32});
    torch::NoGradGuard no_grad;
    return torch::equal(model(input), model(input));
  };
  EXPECT_FALSE(twice_equal(models::ClassifierOptions()));
  EXPECT_FALSE(twice_equal(models::ClassifierOptions().dropout(0.0)));  // stochastic depth remains
  EXPECT_TRUE(twice_equal(models::ClassifierOptions().dropout(0.0).stochastic_depth(0.0)));
}

TEST(Classifier, EvalReachesTheNetwork) {
  auto model = models::create("vit_b_32", models::ClassifierOptions().num_classes(2).image_size(32));
  model->eval();
  EXPECT_FALSE(model->network().is_training());
  model->train();
  EXPECT_TRUE(model->network().is_training());
}
