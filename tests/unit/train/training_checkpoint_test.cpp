#include <gtest/gtest.h>

#include <torch/cuda.h>
#include <torch/torch.h>

#include <map>
#include <string>
#include <vector>

#include "dptrain/common/error.h"
#include "dptrain/models/registry.h"
#include "dptrain/train/checkpoint/checkpoint_file.h"
#include "dptrain/train/checkpoint/optimizer_state.h"
#include "dptrain/train/checkpoint/training_checkpoint.h"
#include "dptrain/optim/lr_schedule.h"
#include "dptrain/optim/optimizer.h"
#include "support/temp_dir.h"
#include "support/tiny_training.h"

using namespace dpt::train;
using dpt::optim::make_optimizer;
using dpt::optim::OptimizerKind;
using dpt::optim::OptimizerOptions;
using dpt::optim::set_lr;

namespace {

// An optimizer of `kind` with its state from one step on a small model, in torchvision's three
// weight-decay groups (other, norm, bias).
struct Stepped {
  explicit Stepped(OptimizerKind kind = OptimizerKind::Sgd)
      : optimizer(make_optimizer(
            *model, OptimizerOptions().kind(kind).weight_decay(1e-4).norm_weight_decay(0.0).bias_weight_decay(1e-5),
            0.05)) {
    torch::manual_seed(1);
    model->forward(torch::randn({2, 3, 8, 8})).sum().backward();
    optimizer->step();
  }
  dpt::models::Classifier model = dpt::models::create("resnet20", dpt::models::ClassifierOptions().num_classes(3));
  std::shared_ptr<torch::optim::Optimizer> optimizer;
};

// The tensors of every parameter's state, in order, and the group hyper-parameters.
std::vector<std::string> describe(const c10::impl::GenericDict& state) {
  std::vector<std::string> lines;
  for (const auto& group : state.at("param_groups").toList()) {
    std::string line;
    for (const auto& entry : group.get().toGenericDict()) {
      if (entry.key().toStringRef() != "params") line += dpt::str(entry.key().toStringRef(), "=", entry.value(), " ");
    }
    lines.push_back(line);
  }
  for (const auto& entry : state.at("state").toGenericDict()) {
    for (const auto& field : entry.value().toGenericDict()) {
      const auto& value = field.value();
      lines.push_back(dpt::str(entry.key().toInt(), ".", field.key().toStringRef(), " ",
                               value.isTensor() ? value.toTensor().sum().item<double>() : value.toInt()));
    }
  }
  return lines;
}

class OptimizerKinds : public ::testing::TestWithParam<OptimizerKind> {};

TEST_P(OptimizerKinds, StateHasPythonsShapeAndRoundTrips) {
  Stepped a(GetParam());
  const auto state = optimizer_state_dict(*a.optimizer);
  const auto groups = state.at("param_groups").toList();
  ASSERT_EQ(groups.size(), 3u);
  const auto params = a.model->parameters();
  const std::vector<double> decays = {1e-4, 0.0, 1e-5};
  size_t numbered = 0;
  for (size_t g = 0; g < groups.size(); ++g) {
    const auto group = groups.get(g).toGenericDict();
    EXPECT_DOUBLE_EQ(group.at("lr").toDouble(), 0.05);
    EXPECT_DOUBLE_EQ(group.at("weight_decay").toDouble(), decays[g]);
    EXPECT_FALSE(group.at("maximize").toBool());
    numbered += group.at("params").toList().size();
  }
  EXPECT_EQ(numbered, params.size());
  // SGD's state is its momentum buffer; the others' also count steps.
  const auto per_param = state.at("state").toGenericDict();
  ASSERT_EQ(per_param.size(), params.size());
  const auto first = per_param.at(0).toGenericDict();
  const std::map<OptimizerKind, std::vector<std::string>> fields = {
      {OptimizerKind::Sgd, {"momentum_buffer"}},
      {OptimizerKind::SgdNesterov, {"momentum_buffer"}},
      {OptimizerKind::RmsProp, {"step", "square_avg", "momentum_buffer"}},
      {OptimizerKind::AdamW, {"step", "exp_avg", "exp_avg_sq"}}};
  std::vector<std::string> keys;
  for (const auto& field : first) keys.push_back(field.key().toStringRef());
  EXPECT_EQ(keys, fields.at(GetParam()));

  Stepped b(GetParam());
  set_lr(*b.optimizer, 1.0);  // load restores the rate too
  b.optimizer->state().clear();
  load_optimizer_state_dict(*b.optimizer, state);
  EXPECT_EQ(describe(optimizer_state_dict(*b.optimizer)), describe(state));
}

INSTANTIATE_TEST_SUITE_P(OptimizerState, OptimizerKinds,
                         ::testing::Values(OptimizerKind::Sgd, OptimizerKind::SgdNesterov, OptimizerKind::RmsProp,
                                           OptimizerKind::AdamW),
                         [](const auto& info) { return to_string(info.param); });

TEST(OptimizerState, OtherModelIsRefused) {
  Stepped a;
  auto other = dpt::models::create("resnet18", dpt::models::ClassifierOptions().num_classes(3));
  torch::optim::SGD sgd(other->parameters(), torch::optim::SGDOptions(0.1));
  EXPECT_THROW(load_optimizer_state_dict(sgd, optimizer_state_dict(*a.optimizer)), dpt::CheckpointError);
}

TEST(OptimizerState, AnotherOptimizersStateIsRefusedByName) {
  Stepped sgd(OptimizerKind::Sgd), adamw(OptimizerKind::AdamW);
  try {
    load_optimizer_state_dict(*adamw.optimizer, optimizer_state_dict(*sgd.optimizer));
    FAIL() << "an SGD state loaded into AdamW";
  } catch (const dpt::CheckpointError& e) {
    EXPECT_NE(std::string(e.what()).find("optimizer state is SGD's, this run's optimizer is AdamW"), std::string::npos)
        << e.what();
  }
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
  cp.optimizer = optimizer_state_dict(*a.optimizer);
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

namespace {

// A ResNet-20 and its SGD (momentum) after one step on `device`: the second step of a run.
struct SteppedOn {
  explicit SteppedOn(torch::Device device) : device(device) {
    torch::manual_seed(4);
    model = dpt::models::create("resnet20", dpt::models::ClassifierOptions().num_classes(3));
    model->to(device);
    optimizer = make_optimizer(*model, OptimizerOptions().weight_decay(1e-4), 0.05);
  }
  void step(const at::Tensor& images) {
    optimizer->zero_grad();
    model->forward(images.to(device)).sum().backward();
    optimizer->step();
  }
  std::vector<at::Tensor> parameters_on_cpu() const {
    std::vector<at::Tensor> out;
    for (const auto& p : model->parameters()) out.push_back(p.detach().cpu());
    return out;
  }
  torch::Device device;
  dpt::models::Classifier model{nullptr};
  std::shared_ptr<torch::optim::Optimizer> optimizer;
};

}  // namespace

// A checkpoint written on a GPU resumes on the CPU, and the reverse: weights and momentum come
// back on the resuming side's device, and its next step is the writer's next step.
TEST(TrainingCheckpoint, MovesBetweenGpuAndCpu_CUDA) {
  if (!torch::cuda::is_available()) GTEST_SKIP() << "no CUDA device";
  at::globalContext().setAllowTF32CuDNN(false);
  at::globalContext().setAllowTF32CuBLAS(false);
  const torch::Device gpu(torch::kCUDA, 0), cpu(torch::kCPU);
  const auto images = torch::randn({4, 3, 8, 8});
  for (const auto& [from, to] : {std::pair{gpu, cpu}, std::pair{cpu, gpu}}) {
    SCOPED_TRACE(from.str() + " to " + to.str());
    SteppedOn writer(from);
    writer.step(images);
    TrainingCheckpoint cp;
    cp.arch = "resnet20";
    cp.state_dict = dpt::models::state_dict(*writer.model);
    cp.optimizer = optimizer_state_dict(*writer.optimizer);
    dpt::testing::TempDir dir;
    const std::filesystem::path file = dir.path() + "/checkpoint.pt";
    save_checkpoint(cp.to_ivalue(), file);

    SteppedOn reader(to);
    const auto back = TrainingCheckpoint::from_ivalue(load_checkpoint(file), file);
    dpt::models::load_state_dict(*reader.model, back.state_dict);
    load_optimizer_state_dict(*reader.optimizer, back.optimizer);
    for (const auto& p : reader.model->parameters()) ASSERT_EQ(p.device(), to);
    const double tolerance = 1e-5;
    EXPECT_LE(dpt::testing::max_difference(reader.parameters_on_cpu(), writer.parameters_on_cpu()), 1e-7);
    writer.step(images);
    reader.step(images);
    EXPECT_LE(dpt::testing::max_difference(reader.parameters_on_cpu(), writer.parameters_on_cpu()), tolerance);
    // Without the momentum buffers the step lands outside it.
    SteppedOn forgetful(to);
    dpt::models::load_state_dict(*forgetful.model, back.state_dict);
    forgetful.step(images);
    EXPECT_GT(dpt::testing::max_difference(forgetful.parameters_on_cpu(), writer.parameters_on_cpu()), 10 * tolerance);
  }
}
