#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <functional>
#include <string>

#include <unistd.h>

#include <torch/torch.h>

#include "dptrain/common/error.h"
#include "dptrain/models/resnet.h"
#include "dptrain/models/state_dict.h"

#include "support/error_of.h"

namespace models = dpt::models;

using dpt::testing::error_of;

namespace {

models::ResNet small_model() { return models::resnet20(models::ResNetOptions().num_classes(10)); }

// Fills every entry with fresh random values, so a copy that misses something shows.
models::StateDict random_state(const models::StateDict& like) {
  models::StateDict out;
  for (const auto& entry : like) {
    const auto& t = entry.value();
    out.insert(entry.key(), t.is_floating_point() ? torch::rand_like(t) + 0.5 : torch::randint_like(t, 100));
  }
  return out;
}

class TempDir {
 public:
  TempDir()
      : path_(std::filesystem::temp_directory_path() / ("dpt_state_dict_test_" + std::to_string(::getpid()))) {
    std::filesystem::create_directories(path_);
  }
  ~TempDir() { std::filesystem::remove_all(path_); }
  std::string file(const std::string& name) const { return (path_ / name).string(); }

 private:
  std::filesystem::path path_;
};

}  // namespace

TEST(StateDict, SharesStorageWithTheModel) {
  auto model = small_model();
  auto dict = models::state_dict(*model);
  dict["fc.bias"].fill_(3.0);
  EXPECT_TRUE(model->named_parameters()["fc.bias"].eq(3.0).all().item<bool>());
  EXPECT_FALSE(dict["fc.bias"].requires_grad());
}

TEST(StateDict, LoadCopiesEveryEntryAndGivesTheSameOutputs) {
  torch::manual_seed(1);
  auto source = small_model();
  models::load_state_dict(*source, random_state(models::state_dict(*source)));
  auto target = small_model();
  models::load_state_dict(*target, models::state_dict(*source));
  auto expected = models::state_dict(*source);
  for (const auto& entry : models::state_dict(*target)) {
    EXPECT_TRUE(torch::equal(entry.value(), expected[entry.key()])) << entry.key();
  }
  source->eval();
  target->eval();
  auto x = torch::randn({2, 3, 16, 16});
  EXPECT_TRUE(torch::equal(source(x), target(x)));
}

TEST(StateDict, LoadConvertsDtype) {
  auto model = small_model();
  models::StateDict doubles;
  for (const auto& entry : models::state_dict(*model)) doubles.insert(entry.key(), entry.value().to(torch::kDouble) + 1);
  models::load_state_dict(*model, doubles);
  EXPECT_EQ(models::state_dict(*model)["fc.bias"].scalar_type(), torch::kFloat);
  EXPECT_EQ(models::state_dict(*model)["bn1.num_batches_tracked"].item<int64_t>(), 1);
}

TEST(StateDict, MissingKeyIsNamed) {
  auto model = small_model();
  auto dict = models::state_dict(*model);
  dict.erase("fc.bias");
  dict.erase("layer1.0.bn1.running_var");
  EXPECT_EQ(error_of<dpt::CheckpointError>([&] { models::load_state_dict(*model, dict); }),
            "state dict does not match the dpt::models::ResNetImpl model (116 entries expected, 114 given): "
            "2 missing keys (first: 'layer1.0.bn1.running_var'); check the architecture and num_classes the "
            "state dict was saved with");
}

TEST(StateDict, UnexpectedKeysFromAWrapperGetAHint) {
  auto model = small_model();
  models::StateDict wrapped;
  for (const auto& entry : models::state_dict(*model)) wrapped.insert("module." + entry.key(), entry.value());
  EXPECT_EQ(error_of<dpt::CheckpointError>([&] { models::load_state_dict(*model, wrapped); }),
            "state dict does not match the dpt::models::ResNetImpl model (116 entries expected, 116 given): "
            "116 missing keys (first: 'conv1.weight'), 116 unexpected keys (first: 'module.conv1.weight'); "
            "the keys start with 'module.', as saved from a (Distributed)DataParallel wrapper: save the "
            "wrapped module's state dict, or strip the prefix");
}

TEST(StateDict, ShapeMismatchNamesBothShapesAndCopiesNothing) {
  auto model = small_model();
  auto before = models::state_dict(*model)["conv1.weight"].clone();
  auto other = models::state_dict(*models::resnet20(models::ResNetOptions().num_classes(100)));
  EXPECT_EQ(error_of<dpt::CheckpointError>([&] { models::load_state_dict(*model, other); }),
            "state dict entry 'fc.weight' has the wrong shape: the model expects [10, 64], the state dict "
            "has [100, 64]; check the architecture and num_classes the state dict was saved with");
  EXPECT_TRUE(torch::equal(models::state_dict(*model)["conv1.weight"], before));
}

// Fine-tuning: 100-class weights into a 10-class model keep the model's own classifier and load
// the rest; the model's own classifier is what it was, the body the weights'.
TEST(StateDict, KeepOwnClassifierForWeightsOfOtherClasses) {
  torch::manual_seed(3);
  auto model = small_model();
  const auto own_fc = models::state_dict(*model)["fc.weight"].clone();
  auto hundred = models::resnet20(models::ResNetOptions().num_classes(100));
  auto weights = random_state(models::state_dict(*hundred));
  const auto body = weights["layer3.2.conv2.weight"].clone();
  const models::OwnClassifier kept = models::keep_own_classifier(weights, *model, 10);
  EXPECT_EQ(kept.keys, (std::vector<std::string>{"fc.weight", "fc.bias"}));
  EXPECT_EQ(kept.weights_classes, 100);
  models::load_state_dict(*model, weights);
  EXPECT_TRUE(torch::equal(models::state_dict(*model)["fc.weight"], own_fc));
  EXPECT_TRUE(torch::equal(models::state_dict(*model)["layer3.2.conv2.weight"], body));
}

// Nothing is kept where the weights are for the same classes, or disagree anywhere else: the body
// of another width, a head that differs in more than its classes. load_state_dict then refuses.
TEST(StateDict, KeepOwnClassifierOnlyWhereTheClassesAloneDiffer) {
  auto model = small_model();
  auto same = models::state_dict(*small_model());
  EXPECT_TRUE(models::keep_own_classifier(same, *model, 10).keys.empty());
  auto wider_body = random_state(models::state_dict(*models::resnet20(models::ResNetOptions().num_classes(100))));
  wider_body["conv1.weight"] = torch::zeros({8, 3, 3, 3});
  EXPECT_TRUE(models::keep_own_classifier(wider_body, *model, 10).keys.empty());
  EXPECT_THROW(models::load_state_dict(*model, wider_body), dpt::CheckpointError);
  auto other_head = models::state_dict(*models::resnet20(models::ResNetOptions().num_classes(100)));
  other_head["fc.weight"] = torch::zeros({100, 32});
  EXPECT_TRUE(models::keep_own_classifier(other_head, *model, 10).keys.empty());
  // The classes of the model's own, in the first dimension: a head sized 100 would not be kept for 10.
  auto hundred = models::state_dict(*models::resnet20(models::ResNetOptions().num_classes(100)));
  EXPECT_TRUE(models::keep_own_classifier(hundred, *model, 100).keys.empty());
}

TEST(StateDict, FileRoundTrip) {
  TempDir dir;
  torch::manual_seed(2);
  auto model = small_model();
  auto values = random_state(models::state_dict(*model));
  models::write_state_dict(values, dir.file("state.pt"));
  auto read = models::read_state_dict(dir.file("state.pt"));
  ASSERT_EQ(read.keys(), values.keys());
  for (const auto& entry : values) {
    EXPECT_TRUE(torch::equal(read[entry.key()], entry.value())) << entry.key();
    EXPECT_EQ(read[entry.key()].scalar_type(), entry.value().scalar_type()) << entry.key();
  }
  // Written beside and renamed into place (common/atomic_file.h): nothing else is left.
  std::vector<std::string> names;
  for (const auto& entry : std::filesystem::directory_iterator(dir.file(""))) {
    names.push_back(entry.path().filename().string());
  }
  EXPECT_EQ(names, std::vector<std::string>{"state.pt"});
}

TEST(StateDict, ReadErrorsNameTheFile) {
  TempDir dir;
  EXPECT_EQ(error_of<dpt::CheckpointError>([&] { models::read_state_dict(dir.file("absent.pt")); }),
            "cannot open state dict file '" + dir.file("absent.pt") + "': No such file or directory");
  {
    std::ofstream garbage(dir.file("garbage.pt"));
    garbage << "not a checkpoint";
  }
  EXPECT_EQ(error_of<dpt::CheckpointError>([&] { models::read_state_dict(dir.file("garbage.pt")); })
                .rfind("cannot read state dict file '" + dir.file("garbage.pt") + "' (16 bytes) with LibTorch's unpickler", 0),
            0u);
  {
    const auto bytes = torch::pickle_save(torch::ones({2}));
    std::ofstream tensor(dir.file("tensor.pt"), std::ios::binary);
    tensor.write(bytes.data(), static_cast<std::streamsize>(bytes.size()));
  }
  EXPECT_EQ(error_of<dpt::CheckpointError>([&] { models::read_state_dict(dir.file("tensor.pt")); }),
            "state dict file '" + dir.file("tensor.pt") + "' holds a Tensor, not a dict of name -> tensor; "
            "from Python, save a plain dict of tensors: torch.save(dict(model.state_dict()), path)");
}
