#include <gtest/gtest.h>

#include <torch/torch.h>

#include "dptrain/common/error.h"
#include "dptrain/models/registry.h"
#include "dptrain/train/checkpoint/checkpoint_file.h"
#include "dptrain/train/checkpoint/optimizer_state.h"
#include "dptrain/train/checkpoint/training_checkpoint.h"
#include "support/temp_dir.h"

using namespace dpt::train;

namespace {

// An SGD optimizer with momentum buffers from one step on a small model.
struct Stepped {
  dpt::models::Classifier model = dpt::models::create("resnet20", dpt::models::ClassifierOptions().num_classes(3));
  torch::optim::SGD optimizer{model->parameters(), torch::optim::SGDOptions(0.05).momentum(0.9).weight_decay(1e-4)};
  Stepped() {
    torch::manual_seed(1);
    model->forward(torch::randn({2, 3, 8, 8})).sum().backward();
    optimizer.step();
  }
};

TEST(OptimizerState, HasPythonsShapeAndRoundTrips) {
  Stepped a;
  const auto state = sgd_state_dict(a.optimizer);
  const auto groups = state.at("param_groups").toList();
  ASSERT_EQ(groups.size(), 1u);
  const auto group = groups.get(0).toGenericDict();
  EXPECT_DOUBLE_EQ(group.at("lr").toDouble(), 0.05);
  EXPECT_DOUBLE_EQ(group.at("momentum").toDouble(), 0.9);
  EXPECT_DOUBLE_EQ(group.at("weight_decay").toDouble(), 1e-4);
  EXPECT_FALSE(group.at("nesterov").toBool());
  const auto params = a.model->parameters();
  EXPECT_EQ(group.at("params").toList().size(), params.size());
  EXPECT_EQ(state.at("state").toGenericDict().size(), params.size());

  Stepped b;
  torch::optim::SGD fresh(b.model->parameters(), torch::optim::SGDOptions(1.0));
  load_sgd_state_dict(fresh, state);
  const auto& options = static_cast<const torch::optim::SGDOptions&>(fresh.param_groups()[0].options());
  EXPECT_DOUBLE_EQ(options.lr(), 0.05);
  EXPECT_DOUBLE_EQ(options.momentum(), 0.9);
  const auto again = sgd_state_dict(fresh).at("state").toGenericDict();
  for (int64_t i = 0; i < static_cast<int64_t>(params.size()); ++i) {
    EXPECT_TRUE(again.at(i).toGenericDict().at("momentum_buffer").toTensor().equal(
        state.at("state").toGenericDict().at(i).toGenericDict().at("momentum_buffer").toTensor()))
        << "parameter " << i;
  }
}

TEST(OptimizerState, OtherModelIsRefused) {
  Stepped a;
  auto other = dpt::models::create("resnet18", dpt::models::ClassifierOptions().num_classes(3));
  torch::optim::SGD sgd(other->parameters(), torch::optim::SGDOptions(0.1));
  EXPECT_THROW(load_sgd_state_dict(sgd, sgd_state_dict(a.optimizer)), dpt::CheckpointError);
}

TEST(TrainingCheckpoint, RoundTripsThroughAFile) {
  Stepped a;
  TrainingCheckpoint cp;
  cp.arch = "resnet20";
  cp.epoch = 3;
  cp.step_in_epoch = 7;
  cp.global_step = 52;
  cp.global_batch = 64;
  cp.samples_in_epoch = 400;
  cp.world_size = 4;
  cp.lr_reference_batch = 96;
  cp.best_acc1 = 87.5;
  cp.seed = 11;
  cp.sampler = {11, 3};
  cp.state_dict = dpt::models::state_dict(*a.model);
  cp.optimizer = sgd_state_dict(a.optimizer);
  cp.rng_state = torch::arange(5, torch::kByte);
  dpt::testing::TempDir dir;
  const std::filesystem::path file = dir.path() + "/checkpoint.pt";
  save_checkpoint(cp.to_ivalue(), file);

  const auto back = TrainingCheckpoint::from_ivalue(load_checkpoint(file), file);
  EXPECT_EQ(back.arch, "resnet20");
  EXPECT_EQ(back.epoch, 3);
  EXPECT_EQ(back.step_in_epoch, 7);
  EXPECT_EQ(back.global_step, 52);
  EXPECT_EQ(back.global_batch, 64);
  EXPECT_EQ(back.samples_in_epoch, 400);
  EXPECT_EQ(back.world_size, 4);
  EXPECT_EQ(back.lr_reference_batch, 96);
  EXPECT_DOUBLE_EQ(back.best_acc1, 87.5);
  EXPECT_EQ(back.seed, 11u);
  EXPECT_EQ(back.sampler.epoch, 3);
  EXPECT_TRUE(back.rng_state.equal(cp.rng_state));
  ASSERT_EQ(back.state_dict.size(), cp.state_dict.size());
  for (const auto& item : cp.state_dict) {
    EXPECT_TRUE(back.state_dict[item.key()].equal(item.value())) << item.key();
  }
  // --pretrained reads the weights of such a checkpoint too.
  EXPECT_EQ(read_weights(file).keys(), cp.state_dict.keys());
}

TEST(TrainingCheckpoint, OlderCheckpointsLackTheElasticEntries) {
  TrainingCheckpoint cp;
  cp.arch = "resnet20";
  cp.step_in_epoch = 7;
  cp.global_batch = 64;
  auto dict = cp.to_ivalue().toGenericDict();
  for (const char* key : {"samples_in_epoch", "world_size", "lr_reference_batch"}) EXPECT_EQ(dict.erase(key), 1u) << key;
  const auto back = TrainingCheckpoint::from_ivalue(dict, "old.pt");
  EXPECT_EQ(back.samples_in_epoch, 7 * 64);
  EXPECT_EQ(back.world_size, 0) << "unknown: a resume at any world size is taken as unchanged";
  EXPECT_EQ(back.lr_reference_batch, 0);
}

TEST(TrainingCheckpoint, MissingEntryIsNamed) {
  c10::impl::GenericDict d(c10::StringType::get(), c10::AnyType::get());
  d.insert("arch", std::string("resnet20"));
  try {
    TrainingCheckpoint::from_ivalue(d, "ck.pt");
    FAIL() << "no error";
  } catch (const dpt::CheckpointError& e) {
    EXPECT_STREQ(e.what(),
                 "checkpoint ck.pt has no 'epoch' entry; it was not written by dptrain train (use --pretrained "
                 "for weights alone)");
  }
}

}  // namespace
