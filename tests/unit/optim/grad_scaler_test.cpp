#include <gtest/gtest.h>

#include <limits>
#include <type_traits>

#if defined(DPTRAIN_WITH_CUDA)
#include <c10/cuda/CUDAFunctions.h>
#endif

#include <torch/cuda.h>
#include <torch/nn/modules/linear.h>
#include <torch/optim/sgd.h>
#include <torch/serialize.h>

#include "dptrain/common/error.h"
#include "dptrain/compat/compat.h"
#include "dptrain/optim/fused_sgd.h"
#include "dptrain/optim/grad_scaler.h"
#include "support/thread_ranks.h"
#include "support/tiny_training.h"

using dpt::optim::GradScaler;
using dpt::optim::GradScalerOptions;

namespace {

// One parameter [1, 2] under plain SGD with lr 1, so a step subtracts the unscaled gradient.
struct Fixture {
  torch::Tensor param = torch::tensor({1.0f, 2.0f}).requires_grad_();
  torch::optim::SGD sgd{std::vector<torch::Tensor>{param}, torch::optim::SGDOptions(1.0)};

  void set_grad(std::vector<float> values) { param.mutable_grad() = torch::tensor(values); }
};

constexpr float kInf = std::numeric_limits<float>::infinity();

}  // namespace

TEST(GradScaler, ScalesTheLoss) {
  GradScaler scaler;
  EXPECT_EQ(scaler.get_scale(), 65536.0);
  EXPECT_EQ(scaler.scale(torch::tensor(0.75f)).item<float>(), 49152.0f);
}

TEST(GradScaler, UnscaleDividesExactlyAndStepUsesTheTrueGradients) {
  Fixture f;
  GradScaler scaler;
  f.set_grad({65536.0f * 1.5f, -65536.0f * 0.25f});
  scaler.unscale_(f.sgd);
  EXPECT_TRUE(f.param.grad().equal(torch::tensor({1.5f, -0.25f})));
  scaler.step(f.sgd);
  EXPECT_FALSE(scaler.skipped());  // does not unscale twice
  EXPECT_TRUE(f.param.detach().equal(torch::tensor({-0.5f, 2.25f})));
  scaler.update();
  EXPECT_EQ(scaler.get_scale(), 65536.0);
  EXPECT_EQ(scaler.growth_tracker(), 1);
}

TEST(GradScaler, SkipsTheStepAndBacksOffOnInfOrNaN) {
  for (float bad : {kInf, -kInf, std::numeric_limits<float>::quiet_NaN()}) {
    Fixture f;
    GradScaler scaler(GradScalerOptions().init_scale(1024.0));
    f.set_grad({1.0f, 1.0f});
    scaler.step(f.sgd);
    scaler.update();
    EXPECT_EQ(scaler.growth_tracker(), 1);

    f.set_grad({1.0f, bad});
    scaler.step(f.sgd);
    EXPECT_TRUE(scaler.skipped());
    scaler.update();
    EXPECT_EQ(scaler.get_scale(), 512.0) << bad;
    EXPECT_EQ(scaler.growth_tracker(), 0) << bad;
    // Only the first, good step moved the parameter.
    EXPECT_TRUE(f.param.detach().equal(torch::tensor({1.0f - 1.0f / 1024, 2.0f - 1.0f / 1024})));
  }
}

TEST(GradScaler, GrowsAfterTheIntervalOfGoodSteps) {
  Fixture f;
  GradScaler scaler(GradScalerOptions().init_scale(8.0).growth_interval(3));
  const double expected_scale[] = {8, 8, 16, 16, 16, 32};
  for (int i = 0; i < 6; ++i) {
    f.set_grad({1.0f, 1.0f});
    scaler.step(f.sgd);
    EXPECT_FALSE(scaler.skipped());
    scaler.update();
    EXPECT_EQ(scaler.get_scale(), expected_scale[i]) << i;
    EXPECT_EQ(scaler.growth_tracker(), (i + 1) % 3) << i;
  }
}

TEST(GradScaler, DisabledPassesThrough) {
  Fixture f;
  GradScaler scaler(GradScalerOptions().enabled(false));
  auto loss = torch::tensor(3.0f);
  EXPECT_TRUE(scaler.scale(loss).is_same(loss));
  f.set_grad({2.0f, kInf});
  scaler.unscale_(f.sgd);
  scaler.step(f.sgd);
  EXPECT_FALSE(scaler.skipped());  // no inf check: the step happens
  scaler.update();
  EXPECT_EQ(scaler.get_scale(), 1.0);
  EXPECT_TRUE(scaler.state_dict().empty());
}

TEST(GradScaler, OrderOfCallsIsChecked) {
  Fixture f;
  GradScaler scaler;
  EXPECT_THROW(scaler.update(), dpt::ConfigError);
  f.set_grad({1.0f, 1.0f});
  scaler.unscale_(f.sgd);
  EXPECT_THROW(scaler.unscale_(f.sgd), dpt::ConfigError);
  scaler.step(f.sgd);
  EXPECT_THROW(scaler.step(f.sgd), dpt::ConfigError);
  scaler.update();
  scaler.unscale_(f.sgd);  // a new iteration
}

TEST(GradScaler, StateRoundTripsThroughAPickledDict) {
  Fixture f;
  GradScaler scaler(GradScalerOptions().init_scale(256.0).growth_interval(5));
  for (int i = 0; i < 3; ++i) {
    f.set_grad({1.0f, 1.0f});
    scaler.step(f.sgd);
    scaler.update();
  }
  const auto bytes = torch::pickle_save(scaler.state_dict());
  auto state = torch::pickle_load(bytes).toGenericDict();
  EXPECT_EQ(state.at("scale").toDouble(), 256.0);
  EXPECT_EQ(state.at("_growth_tracker").toInt(), 3);

  GradScaler restored;
  restored.load_state_dict(state);
  EXPECT_EQ(restored.get_scale(), 256.0);
  EXPECT_EQ(restored.growth_tracker(), 3);
  EXPECT_EQ(restored.options().growth_interval(), 5);
  // Both grow on the same step from here.
  for (int i = 0; i < 2; ++i) {
    for (GradScaler* s : {&scaler, &restored}) {
      f.set_grad({1.0f, 1.0f});
      s->step(f.sgd);
      s->update();
    }
  }
  EXPECT_EQ(scaler.get_scale(), 512.0);
  EXPECT_EQ(restored.get_scale(), 512.0);

  ASSERT_EQ(state.erase("_growth_tracker"), 1u);
  try {
    restored.load_state_dict(state);
    FAIL() << "no error";
  } catch (const dpt::CheckpointError& e) {
    EXPECT_STREQ(e.what(),
                 "the loss-scaler state has no '_growth_tracker' entry; was it saved by a GradScaler?");
  }
  EXPECT_THROW(restored.load_state_dict(c10::impl::GenericDict(c10::StringType::get(), c10::AnyType::get())), dpt::CheckpointError);
}

TEST(GradScaler, EveryRankSkipsWhenOneRankFindsInf) {
  dpt::testing::run_ranks(2, [](dpt::dist::Communicator& comm) {
    Fixture f;
    GradScaler scaler(GradScalerOptions().init_scale(4.0), dpt::testing::borrow(comm));
    f.set_grad({4.0f, comm.rank() == 1 ? kInf : 4.0f});
    scaler.step(f.sgd);
    EXPECT_TRUE(scaler.skipped());
    scaler.update();
    EXPECT_EQ(scaler.get_scale(), 2.0);
    EXPECT_TRUE(f.param.detach().equal(torch::tensor({1.0f, 2.0f})));

    f.set_grad({2.0f, 2.0f});
    scaler.step(f.sgd);
    EXPECT_FALSE(scaler.skipped());
    scaler.update();
    EXPECT_TRUE(f.param.detach().equal(torch::tensor({0.0f, 1.0f})));
  });
}

// fp16 autocast on a GPU, where a too large scale overflows the half-precision gradients. A
// linear layer y = W x summed: dL/dy is the scale itself (inf in fp16 past 65504), dL/dW sums the
// scale times x (0.5 and 0.25 over two rows, exact in fp16). From 2^20 the scale halves after
// each overflowing step (2^20 .. 2^16 skipped, W untouched) until 2^15, whose step moves W by
// the true gradient; with growth_interval 2 it doubles after two good steps and overflows again.
// tests/cuda/grad_scaler_sequence.py runs the same steps through torch.cuda.amp.GradScaler and
// checks it gives this sequence too (scripts/gpu-check runs both).
namespace {

#if defined(DPTRAIN_WITH_CUDA)
// While it lives, anything that makes the host wait for the GPU throws, as under
// torch.cuda.set_sync_debug_mode("error").
class NoHostSync {
 public:
  explicit NoHostSync(bool enabled) : enabled_(enabled) {
    if (enabled_) c10::cuda::warning_state().set_sync_debug_mode(c10::cuda::SyncDebugMode::L_ERROR);
  }
  ~NoHostSync() {
    if (enabled_) c10::cuda::warning_state().set_sync_debug_mode(c10::cuda::SyncDebugMode::L_DISABLED);
  }
  NoHostSync(const NoHostSync&) = delete;
  NoHostSync& operator=(const NoHostSync&) = delete;

 private:
  bool enabled_;
};
#endif

template <typename Sgd>
void expect_torch_amp_sequence() {
  const torch::Device gpu(torch::kCUDA, 0);
  torch::nn::Linear linear(torch::nn::LinearOptions(2, 3).bias(false));
  linear->to(gpu);
  {
    torch::NoGradGuard no_grad;
    linear->weight.fill_(0.125);
  }
  Sgd sgd(linear->parameters(), torch::optim::SGDOptions(1.0));
  GradScaler scaler(GradScalerOptions().init_scale(1 << 20).growth_interval(2));
  const auto x = torch::tensor({{0.5f, 0.25f}, {0.5f, 0.25f}}, gpu);
  const double expected_scale[] = {1 << 19, 1 << 18, 1 << 17, 1 << 16, 1 << 15, 1 << 15, 1 << 16, 1 << 15};
  const bool expected_step[] = {false, false, false, false, false, true, true, false};
#if defined(DPTRAIN_WITH_CUDA)
  // With FusedSGD the whole iteration stays on the GPU once the scale is there (the first one
  // copies it over).
  const bool on_the_device = std::is_same_v<Sgd, dpt::optim::FusedSGD> && dpt::compat::has_fused_sgd();
#endif
  float weight = 0.125f;
  for (int i = 0; i < 8; ++i) {
    {
#if defined(DPTRAIN_WITH_CUDA)
      NoHostSync no_sync(on_the_device && i > 0);
#endif
      sgd.zero_grad();
      at::Tensor y;
      {
        dpt::compat::AutocastGuard autocast(torch::kCUDA, at::kHalf, true);
        y = linear->forward(x);
      }
      ASSERT_EQ(y.scalar_type(), at::kHalf);
      scaler.scale(y.to(at::kFloat).sum()).backward();
      scaler.step(sgd);
      scaler.update();
    }
    EXPECT_EQ(scaler.skipped(), !expected_step[i]) << i;
    EXPECT_EQ(scaler.get_scale(), expected_scale[i]) << i;
    if (expected_step[i]) weight -= 1.0f;  // column 0: dL/dW = 0.5 + 0.5, each row of W alike
    EXPECT_TRUE(linear->weight.select(1, 0).cpu().equal(torch::full({3}, weight))) << i;
  }
}

}  // namespace

// The flag read back before SGD's step, and decided on the device by FusedSGD (where the
// iteration then never waits for the GPU): the same sequence.
TEST(GradScaler, HalfGradientsOverflowAndBackOffAsTorchAmp_CUDA) {
  if (!torch::cuda::is_available()) GTEST_SKIP() << "no CUDA device";
  expect_torch_amp_sequence<torch::optim::SGD>();
  expect_torch_amp_sequence<dpt::optim::FusedSGD>();
}
