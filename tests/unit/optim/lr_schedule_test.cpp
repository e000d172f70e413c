#include <gtest/gtest.h>

#include <torch/optim/sgd.h>

#include <string>
#include <vector>

#include "dptrain/common/error.h"
#include "dptrain/optim/lr_schedule.h"
#include "support/python_oracle.h"

using dpt::optim::LrDecay;
using dpt::optim::LrSchedule;
using dpt::optim::LrScheduleOptions;

// The expected rates after warm-up come from Python PyTorch 1.13 (/usr/bin/python3): an SGD
// optimizer with lr=0.4 (the scaled peak below) and the named scheduler, recording
// param_groups[0]['lr'] before each scheduler.step(); StepLR and MultiStepLR stepped once per
// epoch, CosineAnnealingLR once per iteration. Warm-up values are by hand: 0.1 + 0.3 * s / 20.
namespace {

constexpr int64_t kStepsPerEpoch = 10;

// base 0.1 at batch 256, run at 1024: peak 0.4; two epochs (20 steps) of warm-up.
LrScheduleOptions goyal(LrDecay decay) {
  return LrScheduleOptions(0.1).global_batch(1024).warmup_epochs(2).decay(decay);
}

}  // namespace

TEST(LrSchedule, LinearScalingRule) {
  EXPECT_DOUBLE_EQ(LrSchedule(LrScheduleOptions(0.1).global_batch(1024), 5).peak_lr(), 0.4);
  EXPECT_DOUBLE_EQ(
      LrSchedule(LrScheduleOptions(0.1).global_batch(1024).reference_batch(512), 5).peak_lr(), 0.2);
  EXPECT_DOUBLE_EQ(
      LrSchedule(LrScheduleOptions(0.1).global_batch(1024).reference_batch(std::nullopt), 5)
          .peak_lr(),
      0.1);
}

TEST(LrSchedule, WarmupIsLinearInTheStep) {
  LrSchedule schedule(goyal(LrDecay::None), kStepsPerEpoch);
  EXPECT_EQ(schedule.warmup_steps(), 20);
  EXPECT_DOUBLE_EQ(schedule.lr_at(0), 0.1);
  EXPECT_DOUBLE_EQ(schedule.lr_at(1), 0.115);
  EXPECT_DOUBLE_EQ(schedule.lr_at(10), 0.25);
  EXPECT_DOUBLE_EQ(schedule.lr_at(19), 0.385);
  EXPECT_DOUBLE_EQ(schedule.lr_at(20), 0.4);
  EXPECT_DOUBLE_EQ(schedule.lr_at(1000), 0.4);

  LrSchedule from_zero(goyal(LrDecay::None).warmup_start_lr(0.0), kStepsPerEpoch);
  EXPECT_DOUBLE_EQ(from_zero.lr_at(0), 0.0);
  EXPECT_DOUBLE_EQ(from_zero.lr_at(5), 0.1);
}

TEST(LrSchedule, WarmupNeverStartsAboveThePeak) {
  // A global batch of 128 scales 0.1 down to 0.05: warm-up starts there, so the rate is flat
  // rather than falling from 0.1.
  LrSchedule small_batch(LrScheduleOptions(0.1).global_batch(128).warmup_epochs(2), kStepsPerEpoch);
  EXPECT_DOUBLE_EQ(small_batch.peak_lr(), 0.05);
  EXPECT_DOUBLE_EQ(small_batch.lr_at(0), 0.05);
  EXPECT_DOUBLE_EQ(small_batch.lr_at(7), 0.05);
}

TEST(LrSchedule, StepMatchesStepLR) {
  LrSchedule schedule(goyal(LrDecay::Step).step_epochs(3), kStepsPerEpoch);
  // StepLR(step_size=3, gamma=0.1) for epochs 2..7.
  const double expected[] = {0.4, 0.04000000000000001, 0.04000000000000001,
                             0.04000000000000001, 0.004000000000000001, 0.004000000000000001};
  for (int64_t epoch = 2; epoch < 8; ++epoch) {
    for (int64_t step : {int64_t{0}, kStepsPerEpoch - 1}) {
      EXPECT_DOUBLE_EQ(schedule.lr_at(epoch, step), expected[epoch - 2]) << epoch << "/" << step;
    }
  }
}

TEST(LrSchedule, MultiStepMatchesMultiStepLR) {
  LrSchedule schedule(goyal(LrDecay::MultiStep).milestones({3, 5}), kStepsPerEpoch);
  // MultiStepLR(milestones=[3, 5], gamma=0.1) for epochs 2..7.
  const double expected[] = {0.4, 0.04000000000000001, 0.04000000000000001,
                             0.004000000000000001, 0.004000000000000001, 0.004000000000000001};
  for (int64_t epoch = 2; epoch < 8; ++epoch) {
    EXPECT_DOUBLE_EQ(schedule.lr_at(epoch, 0), expected[epoch - 2]) << epoch;
    EXPECT_DOUBLE_EQ(schedule.lr_at(epoch, 9), expected[epoch - 2]) << epoch;
  }
}

TEST(LrSchedule, CosineMatchesCosineAnnealingLRAfterWarmup) {
  LrSchedule schedule(goyal(LrDecay::Cosine).epochs(6).min_lr(0.001), kStepsPerEpoch);
  // CosineAnnealingLR(T_max=40, eta_min=0.001) after t iterations, t = step - 20. PyTorch's
  // recursive form differs from the closed form in the last bits, hence the tolerance.
  const std::pair<int64_t, double> expected[] = {{0, 0.4},
                                                 {1, 0.3993850080797591},
                                                 {7, 0.3706017127886414},
                                                 {20, 0.20049999999999998},
                                                 {39, 0.0016149919202409712},
                                                 {40, 0.001}};
  for (const auto& [t, lr] : expected) {
    EXPECT_NEAR(schedule.lr_at(20 + t), lr, 1e-15) << t;
  }
  EXPECT_DOUBLE_EQ(schedule.lr_at(500), 0.001);  // stays at the floor past the planned end
}

TEST(LrSchedule, EpochAndStepGiveTheGlobalStep) {
  LrSchedule schedule(goyal(LrDecay::Cosine).epochs(6), kStepsPerEpoch);
  EXPECT_EQ(schedule.lr_at(3, 7), schedule.lr_at(37));
}

TEST(LrSchedule, RejectsOptionsThatCannotWork) {
  EXPECT_THROW(LrSchedule(LrScheduleOptions(0.1), 0), dpt::ConfigError);
  EXPECT_THROW(LrSchedule(LrScheduleOptions(-0.1), 10), dpt::ConfigError);
  EXPECT_THROW(LrSchedule(goyal(LrDecay::MultiStep), 10), dpt::ConfigError);
  EXPECT_THROW(LrSchedule(goyal(LrDecay::MultiStep).milestones({5, 3}), 10), dpt::ConfigError);
  EXPECT_THROW(LrSchedule(goyal(LrDecay::Cosine).epochs(2), 10), dpt::ConfigError);
  EXPECT_THROW(LrSchedule(goyal(LrDecay::Step).step_epochs(0), 10), dpt::ConfigError);
  EXPECT_EQ(dpt::optim::parse_lr_decay("multistep"), LrDecay::MultiStep);
  try {
    dpt::optim::parse_lr_decay("linear");
    FAIL() << "no error";
  } catch (const dpt::ConfigError& e) {
    EXPECT_STREQ(e.what(),
                 "unknown learning-rate schedule 'linear': use one of none, step, multistep, cosine, exponential");
  }
}

TEST(LrSchedule, SetLrReachesEveryParamGroup) {
  auto a = torch::zeros({1}, torch::requires_grad());
  auto b = torch::zeros({1}, torch::requires_grad());
  torch::optim::SGD sgd({torch::optim::OptimizerParamGroup({a}),
                         torch::optim::OptimizerParamGroup({b})},
                        torch::optim::SGDOptions(1.0));
  dpt::optim::set_lr(sgd, 0.25);
  for (auto& group : sgd.param_groups()) EXPECT_EQ(group.options().get_lr(), 0.25);
}

namespace {

// torchvision's train.py schedules, built as it builds them and stepped once per epoch, for
// 12 epochs at a base rate of 0.5: one line of rates per configuration below.
const char* kTorchvisionSchedules = R"(
import warnings
warnings.filterwarnings("ignore")
import torch
from torch.optim import lr_scheduler as S

def rates(name, warmup, method, decay, step_size=3, gamma=0.1, lr_min=0.0, epochs=12):
    opt = torch.optim.SGD([torch.zeros(1, requires_grad=True)], lr=0.5)
    main = {"steplr": lambda: S.StepLR(opt, step_size=step_size, gamma=gamma),
            "cosineannealinglr": lambda: S.CosineAnnealingLR(opt, T_max=epochs - warmup, eta_min=lr_min),
            "exponentiallr": lambda: S.ExponentialLR(opt, gamma=gamma)}[name]()
    if warmup > 0:
        first = (S.LinearLR(opt, start_factor=decay, total_iters=warmup) if method == "linear"
                 else S.ConstantLR(opt, factor=decay, total_iters=warmup))
        main = S.SequentialLR(opt, schedulers=[first, main], milestones=[warmup])
    out = []
    for _ in range(epochs):
        out.append(opt.param_groups[0]["lr"])
        opt.step()
        main.step()
    print(" ".join(repr(v) for v in out))

rates("steplr", 2, "linear", 0.01, step_size=3, gamma=0.1)
rates("cosineannealinglr", 3, "constant", 0.1, lr_min=1e-5)
rates("cosineannealinglr", 0, "linear", 0.01)
rates("exponentiallr", 4, "linear", 0.2, gamma=0.9)
rates("steplr", 0, "linear", 0.01, step_size=5, gamma=0.5)
)";

constexpr int64_t kEpochSteps = 5;

LrScheduleOptions torchvision(LrDecay decay, int64_t warmup, dpt::optim::WarmupMethod method, double decay_factor) {
  return LrScheduleOptions(0.5)
      .reference_batch(std::nullopt)
      .per_epoch(true)
      .epochs(12)
      .decay(decay)
      .warmup_epochs(warmup)
      .warmup_method(method)
      .warmup_decay(decay_factor);
}

}  // namespace

// Per epoch, with linear and constant warm-up and each of torchvision's three main schedules:
// every step of each epoch runs at the rate Python's schedulers give that epoch.
TEST(LrSchedule, PerEpochMatchesTorchvisionsSchedulers) {
  auto out = dpt::testing::run_python(kTorchvisionSchedules);
  if (!out) DPT_MISSING_DEPENDENCY(dpt::testing::oracle_missing("torch"));
  const auto expected = dpt::testing::parse_lines<double>(*out);
  using dpt::optim::WarmupMethod;
  const std::vector<LrScheduleOptions> ours = {
      torchvision(LrDecay::Step, 2, WarmupMethod::Linear, 0.01).step_epochs(3).gamma(0.1),
      torchvision(LrDecay::Cosine, 3, WarmupMethod::Constant, 0.1).min_lr(1e-5),
      torchvision(LrDecay::Cosine, 0, WarmupMethod::Linear, 0.01),
      torchvision(LrDecay::Exponential, 4, WarmupMethod::Linear, 0.2).gamma(0.9),
      torchvision(LrDecay::Step, 0, WarmupMethod::Linear, 0.01).step_epochs(5).gamma(0.5)};
  ASSERT_EQ(expected.size(), ours.size());
  for (size_t c = 0; c < ours.size(); ++c) {
    LrSchedule schedule(ours[c], kEpochSteps);
    ASSERT_EQ(expected[c].size(), 12u);
    for (int64_t epoch = 0; epoch < 12; ++epoch) {
      for (int64_t step : {int64_t{0}, kEpochSteps - 1}) {
        EXPECT_NEAR(schedule.lr_at(epoch, step), expected[c][epoch], 1e-12 * expected[c][0])
            << "schedule " << c << " epoch " << epoch << " step " << step;
      }
    }
  }
}

TEST(LrSchedule, TorchvisionNamesAndWarmupMethods) {
  EXPECT_EQ(dpt::optim::parse_torchvision_lr_scheduler("CosineAnnealingLR"), LrDecay::Cosine);
  EXPECT_EQ(dpt::optim::parse_torchvision_lr_scheduler("exponentiallr"), LrDecay::Exponential);
  EXPECT_THROW(dpt::optim::parse_torchvision_lr_scheduler("cosine"), dpt::ConfigError);
  EXPECT_EQ(dpt::optim::parse_warmup_method("constant"), dpt::optim::WarmupMethod::Constant);
  EXPECT_THROW(dpt::optim::parse_warmup_method("cosine"), dpt::ConfigError);
  // Per step, a constant warm-up holds the start rate until the peak.
  LrSchedule constant(LrScheduleOptions(0.4).reference_batch(std::nullopt).warmup_epochs(1).warmup_decay(0.25)
                          .warmup_method(dpt::optim::WarmupMethod::Constant).decay(LrDecay::None),
                      kEpochSteps);
  EXPECT_DOUBLE_EQ(constant.lr_at(kEpochSteps - 1), 0.1);
  EXPECT_DOUBLE_EQ(constant.lr_at(kEpochSteps), 0.4);
  EXPECT_THROW(LrSchedule(LrScheduleOptions(0.1).warmup_decay(0.0), 5), dpt::ConfigError);
}
