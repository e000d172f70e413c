#include "dptrain/optim/lr_schedule.h"

#include <algorithm>
#include <cmath>

#include "dptrain/common/error.h"
#include "dptrain/common/text.h"

namespace dpt::optim {

LrDecay parse_lr_decay(const std::string& name) {
  if (name == "none") return LrDecay::None;
  if (name == "step") return LrDecay::Step;
  if (name == "multistep") return LrDecay::MultiStep;
  if (name == "cosine") return LrDecay::Cosine;
  if (name == "exponential") return LrDecay::Exponential;
  throw ConfigError(str("unknown learning-rate schedule '", name,
                        "': use one of none, step, multistep, cosine, exponential"));
}

LrDecay parse_torchvision_lr_scheduler(const std::string& name) {
  const std::string lower = ascii_lower(name);
  if (lower == "steplr") return LrDecay::Step;
  if (lower == "cosineannealinglr") return LrDecay::Cosine;
  if (lower == "exponentiallr") return LrDecay::Exponential;
  throw ConfigError(str("unknown --lr-scheduler '", name, "': use steplr, cosineannealinglr or exponentiallr"));
}

WarmupMethod parse_warmup_method(const std::string& name) {
  if (name == "constant") return WarmupMethod::Constant;
  DPT_CHECK(name == "linear", ConfigError, "unknown warm-up method '", name, "': use linear or constant");
  return WarmupMethod::Linear;
}

std::string to_string(WarmupMethod method) { return method == WarmupMethod::Constant ? "constant" : "linear"; }

std::string to_string(LrDecay decay) {
  switch (decay) {
    case LrDecay::None: return "none";
    case LrDecay::Step: return "step";
    case LrDecay::MultiStep: return "multistep";
    case LrDecay::Cosine: return "cosine";
    case LrDecay::Exponential: return "exponential";
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
  DPT_CHECK(!o.warmup_decay() || (*o.warmup_decay() > 0 && *o.warmup_decay() <= 1), ConfigError,
            "the warm-up decay (start factor) must lie in (0, 1], got ", o.warmup_decay().value_or(0));
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
  warmup_start_lr_ = o.warmup_decay() ? *o.warmup_decay() * peak_lr_
                                      : o.warmup_start_lr().value_or(std::min(o.base_lr(), peak_lr_));

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
  return global_step < warmup_steps_ ? warmup_lr(global_step) : decayed(global_step);
}

double LrSchedule::warmup_lr(int64_t global_step) const {
  if (options_.warmup_method() == WarmupMethod::Constant) return warmup_start_lr_;
  // Linear in the step (or, per epoch, in the epoch): the first step runs at the start rate, the
  // first step after warm-up at the peak.
  const double progress = options_.per_epoch()
                              ? static_cast<double>(global_step / steps_per_epoch_) / options_.warmup_epochs()
                              : static_cast<double>(global_step) / warmup_steps_;
  return warmup_start_lr_ + (peak_lr_ - warmup_start_lr_) * progress;
}

double LrSchedule::decayed(int64_t global_step) const {
  const auto& o = options_;
  // Step and multistep decay happen at epoch boundaries, counted from the start of training, as
  // when pytorch/examples call scheduler.step() once per epoch; per epoch, every decay counts its
  // epochs from the end of warm-up, as the second scheduler of torchvision's SequentialLR does.
  const int64_t epoch = global_step / steps_per_epoch_ - (o.per_epoch() ? o.warmup_epochs() : 0);
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
    case LrDecay::Exponential:
      return peak_lr_ * std::pow(o.gamma(), static_cast<double>(epoch));
    case LrDecay::Cosine: {
      // CosineAnnealingLR's closed form with T_max = the steps (per epoch: the epochs) after
      // warm-up; past the planned end the rate stays at the floor instead of rising again.
      const int64_t span =
          o.per_epoch() ? o.epochs() - o.warmup_epochs() : o.epochs() * steps_per_epoch_ - warmup_steps_;
      const int64_t t = std::min(o.per_epoch() ? epoch : global_step - warmup_steps_, span);
      const double pi = std::acos(-1.0);
      return o.min_lr() + (peak_lr_ - o.min_lr()) * (1 + std::cos(pi * static_cast<double>(t) / span)) / 2;
    }
  }
  DPT_ASSERT(false, "unhandled LrDecay ", static_cast<int>(o.decay()));
}

void set_lr(torch::optim::Optimizer& optimizer, double lr) {
  for (auto& group : optimizer.param_groups()) group.options().set_lr(lr);
}

}  // namespace dpt::optim
