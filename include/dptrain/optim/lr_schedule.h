#pragma once
// The learning rate as a pure function of the global step: the linear scaling rule, a gradual
// linear warm-up, then step, multistep or cosine decay (Goyal et al., "Accurate, Large Minibatch
// SGD", and the schedules of torch.optim.lr_scheduler).
//
//   dpt::optim::LrSchedule schedule(
//       dpt::optim::LrScheduleOptions(0.1).global_batch(1024).warmup_epochs(5)
//           .decay(dpt::optim::LrDecay::MultiStep).milestones({30, 60, 80}),
//       /*steps_per_epoch=*/1251);
//   for (...) {
//     dpt::optim::set_lr(optimizer, schedule.lr_at(epoch, step_in_epoch));
//     ...
//   }
//
// Nothing here has state: after a resume, the same (epoch, step) gives the same rate, exactly.
// Decay counts epochs from the start of training but begins when warm-up ends: a step or
// milestone inside the warm-up applies from its first step after.
//
// With per_epoch, the schedule is torchvision's (references/classification/train.py): the rate
// changes at epoch boundaries only, as SequentialLR([LinearLR or ConstantLR, main], milestones=
// [warmup_epochs]) stepped once per epoch gives it, and the main schedule counts its epochs from
// the end of warm-up.

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include <torch/arg.h>
#include <torch/optim/optimizer.h>

namespace dpt::optim {

enum class LrDecay {
  None,       // the scaled rate throughout
  Step,       // times gamma every step_epochs epochs (StepLR stepped once per epoch)
  MultiStep,  // times gamma at each milestone epoch (MultiStepLR stepped once per epoch)
  Cosine,     // half a cosine from the scaled rate to min_lr over the steps after warm-up
              // (CosineAnnealingLR stepped once per iteration)
  Exponential,  // times gamma every epoch (ExponentialLR stepped once per epoch)
};

// "step" -> LrDecay::Step; throws ConfigError naming the accepted names otherwise.
LrDecay parse_lr_decay(const std::string& name);
std::string to_string(LrDecay decay);
// torchvision's --lr-scheduler names: "steplr", "cosineannealinglr", "exponentiallr" (any case).
LrDecay parse_torchvision_lr_scheduler(const std::string& name);

enum class WarmupMethod {
  Linear,    // from the start rate up to the peak (LinearLR)
  Constant,  // the start rate throughout, then the peak (ConstantLR)
};
// "linear" or "constant"; ConfigError otherwise.
WarmupMethod parse_warmup_method(const std::string& name);
std::string to_string(WarmupMethod method);

struct LrScheduleOptions {
  explicit LrScheduleOptions(double base_lr) : base_lr_(base_lr) {}
  // The rate for reference_batch samples per step (pytorch/examples' --lr).
  TORCH_ARG(double, base_lr);
  // Samples per optimizer step over all ranks.
  TORCH_ARG(int64_t, global_batch) = 256;
  // Linear scaling: the peak rate is base_lr * global_batch / reference_batch. Unset: no scaling,
  // the peak rate is base_lr.
  TORCH_ARG(std::optional<int64_t>, reference_batch) = 256;
  // Epochs of linear warm-up, counted in steps, from warmup_start_lr to the peak rate.
  TORCH_ARG(int64_t, warmup_epochs) = 0;
  // Where warm-up starts. Unset: base_lr (Goyal et al. ramp from the unscaled rate), or the peak
  // rate when scaling lowers it (a global batch under reference_batch), so that warm-up never
  // starts above where it ends.
  TORCH_ARG(std::optional<double>, warmup_start_lr) = std::nullopt;
  // Where warm-up starts as a fraction of the peak (torchvision's --lr-warmup-decay); takes the
  // place of warmup_start_lr when set.
  TORCH_ARG(std::optional<double>, warmup_decay) = std::nullopt;
  TORCH_ARG(WarmupMethod, warmup_method) = WarmupMethod::Linear;
  // The rate changes once per epoch, torchvision's way (see above).
  TORCH_ARG(bool, per_epoch) = false;
  TORCH_ARG(LrDecay, decay) = LrDecay::Step;
  // Step: decay period in epochs (counted from epoch 0, warm-up included).
  TORCH_ARG(int64_t, step_epochs) = 30;
  // Step, MultiStep, Exponential: the factor applied at each decay.
  TORCH_ARG(double, gamma) = 0.1;
  // MultiStep: the epochs at which the rate is multiplied by gamma, increasing.
  TORCH_ARG(std::vector<int64_t>, milestones) = {};
  // Cosine: the floor reached at the last step (CosineAnnealingLR's eta_min).
  TORCH_ARG(double, min_lr) = 0.0;
  // Cosine: the length of training, which the cosine ends with.
  TORCH_ARG(int64_t, epochs) = 90;
};

// The rate after linear scaling for options.global_batch(): base_lr x global_batch /
// reference_batch, or base_lr without a reference batch.
double scaled_lr(const LrScheduleOptions& options);

class LrSchedule {
 public:
  // Throws ConfigError for options that cannot work (non-positive rates, batches or periods,
  // unsorted milestones, a cosine with no steps after warm-up).
  LrSchedule(LrScheduleOptions options, int64_t steps_per_epoch);

  // The rate after linear scaling: what warm-up ends at and decay starts from.
  double peak_lr() const { return peak_lr_; }
  int64_t steps_per_epoch() const { return steps_per_epoch_; }
  int64_t warmup_steps() const { return warmup_steps_; }

  // The rate for the optimizer step numbered `global_step` (0 is the first step of training).
  double lr_at(int64_t global_step) const;
  double lr_at(int64_t epoch, int64_t step_in_epoch) const {
    return lr_at(epoch * steps_per_epoch_ + step_in_epoch);
  }

  const LrScheduleOptions& options() const { return options_; }

 private:
  double warmup_lr(int64_t global_step) const;
  double decayed(int64_t global_step) const;

  LrScheduleOptions options_;
  int64_t steps_per_epoch_;
  int64_t warmup_steps_;
  double peak_lr_;
  double warmup_start_lr_;
};

// Sets the rate of every parameter group of `optimizer`.
void set_lr(torch::optim::Optimizer& optimizer, double lr);

}  // namespace dpt::optim
