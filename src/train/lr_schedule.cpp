#include "dptrain/train/lr_schedule.h"

#include <algorithm>
#include <cmath>

#include "dptrain/common/error.h"

namespace dpt::train {

LrDecay parse_lr_decay(const std::string& name) {
  if (name == "none") return LrDecay::None;
  if (name == "step") return LrDecay::Step;
  if (name == "multistep") return LrDecay::MultiStep;
  if (name == "cosine") return LrDecay::Cosine;
  throw ConfigError(str("unknown learning-rate schedule '", name,
                        "': use one of none, step, multistep, cosine"));
}

std::string to_string(LrDecay decay) {
  switch (decay) {
    case LrDecay::None: return "none";
    case LrDecay::Step: return "step";
    case LrDecay::MultiStep: return "multistep";
    case LrDecay::Cosine: return "cosine";
  }
  DPT_ASSERT(false, "unhandled LrDecay ", static_cast<int>(decay));
}

double scaled_lr(const LrScheduleOptions& o) {
  return o.reference_batch() ? o.base_lr() * static_cast<double>(o.global_batch()) / *o.reference_batch()
                             : o.base_lr();
}

LrSchedule::LrSchedule(LrScheduleOptions options, int64_t steps_per_epoch)
    : options_(std::move(options)), steps_per_epoch_(steps_per_epoch) {
  const auto& o = options_;
  DPT_CHECK(steps_per_epoch > 0, ConfigError, "steps per epoch must be positive, got ",
            steps_per_epoch, "; is the dataset smaller than one global batch?");
  DPT_CHECK(o.base_lr() > 0, ConfigError, "the learning rate must be positive, got ", o.base_lr());
  DPT_CHECK(o.global_batch() > 0, ConfigError, "the global batch must be positive, got ",
            o.global_batch());
  DPT_CHECK(!o.reference_batch() || *o.reference_batch() > 0, ConfigError,
            "the reference batch of the linear scaling rule must be positive, got ",
            o.reference_batch().value_or(0));
  DPT_CHECK(o.warmup_epochs() >= 0, ConfigError, "warm-up epochs must not be negative, got ",
            o.warmup_epochs());
  DPT_CHECK(!o.warmup_start_lr() || *o.warmup_start_lr() >= 0, ConfigError,
            "the warm-up start rate must not be negative, got ", o.warmup_start_lr().value_or(0));
  DPT_CHECK(o.gamma() > 0, ConfigError, "the decay factor gamma must be positive, got ", o.gamma());
  if (o.decay() == LrDecay::Step) {
    DPT_CHECK(o.step_epochs() > 0, ConfigError, "the step decay period must be positive, got ",
              o.step_epochs(), " epochs");
  }
  if (o.decay() == LrDecay::MultiStep) {
    DPT_CHECK(!o.milestones().empty(), ConfigError,
              "the multistep schedule needs at least one milestone epoch");
    DPT_CHECK(std::is_sorted(o.milestones().begin(), o.milestones().end()), ConfigError,
              "the multistep milestones must be in increasing order");
  }

  warmup_steps_ = o.warmup_epochs() * steps_per_epoch;
  peak_lr_ = scaled_lr(o);
  warmup_start_lr_ = o.warmup_start_lr().value_or(std::min(o.base_lr(), peak_lr_));

  if (o.decay() == LrDecay::Cosine) {
    DPT_CHECK(o.epochs() > o.warmup_epochs(), ConfigError, "the cosine schedule needs epochs (",
              o.epochs(), ") beyond the warm-up (", o.warmup_epochs(), ")");
    DPT_CHECK(o.min_lr() >= 0 && o.min_lr() <= peak_lr_, ConfigError,
              "the cosine floor must lie between 0 and the peak rate ", peak_lr_, ", got ",
              o.min_lr());
  }
}

double LrSchedule::lr_at(int64_t global_step) const {
  DPT_CHECK(global_step >= 0, ConfigError, "the global step must not be negative, got ",
            global_step);
  if (global_step < warmup_steps_) {
    // Linear in the step: the first step runs at the start rate, the first step after warm-up at
    // the peak.
    const double progress = static_cast<double>(global_step) / warmup_steps_;
    return warmup_start_lr_ + (peak_lr_ - warmup_start_lr_) * progress;
  }
  return decayed(global_step);
}

double LrSchedule::decayed(int64_t global_step) const {
  const auto& o = options_;
  // Step and multistep decay happen at epoch boundaries, counted from the start of training, as
  // when pytorch/examples call scheduler.step() once per epoch.
  const int64_t epoch = global_step / steps_per_epoch_;
  switch (o.decay()) {
    case LrDecay::None:
      return peak_lr_;
    case LrDecay::Step:
      return peak_lr_ * std::pow(o.gamma(), static_cast<double>(epoch / o.step_epochs()));
    case LrDecay::MultiStep: {
      const auto passed = std::upper_bound(o.milestones().begin(), o.milestones().end(), epoch) -
                          o.milestones().begin();
      return peak_lr_ * std::pow(o.gamma(), static_cast<double>(passed));
    }
    case LrDecay::Cosine: {
      // CosineAnnealingLR's closed form with T_max = the steps after warm-up; past the planned
      // end the rate stays at the floor instead of rising again.
      const int64_t span = o.epochs() * steps_per_epoch_ - warmup_steps_;
      const int64_t t = std::min(global_step - warmup_steps_, span);
      const double pi = std::acos(-1.0);
      return o.min_lr() + (peak_lr_ - o.min_lr()) * (1 + std::cos(pi * t / span)) / 2;
    }
  }
  DPT_ASSERT(false, "unhandled LrDecay ", static_cast<int>(o.decay()));
}

void set_lr(torch::optim::Optimizer& optimizer, double lr) {
  for (auto& group : optimizer.param_groups()) group.options().set_lr(lr);
}

}  // namespace dpt::train
