#pragma once
// The parts of a training step, in the order they run: one list that the trainer times, the
// timeline writes (each part's name is its span's name in the trace) and `dptrain report` reads
// back, so that a part added here is recorded and shown without a second list to keep in step.
//
//   StepPhaseTimer forward(hook, StepPhase::Forward, step);   // hook->on_phase(...) when it ends
//   ...
//   for (StepPhase phase : step_phases()) std::cout << name_of(phase);

#include <chrono>
#include <cstdint>
#include <optional>
#include <string_view>
#include <vector>

namespace dpt::train {

enum class StepPhase {
  Data,                  // waiting for the loader's next batches
  CopyToDevice,          // batches to the device, and batch mixing
  Forward,
  Backward,              // backward's compute, with the wait for communication at its end
  WaitForCommunication,  // inside Backward: the gradient buckets still in flight
  Synchronize,           // the style's synchronize() (the parameter server's weights arriving)
  MetricsAllReduce,      // the step's sums over the ranks
  Optimizer,             // clipping, the optimizer's and the scaler's step, the EMA
};

// Every phase, in the order of a step.
const std::vector<StepPhase>& step_phases();
// "copy to device", "wait for communication": the phase's span name in a timeline.
std::string_view name_of(StepPhase phase);
// The phase a span name stands for; nullopt for other spans ("step", "validation", a bucket).
std::optional<StepPhase> step_phase_named(std::string_view name);

// Watches a step's phases as they end (the timeline is one; a profiler could be another).
class StepPhaseHook {
 public:
  using Clock = std::chrono::steady_clock;
  virtual ~StepPhaseHook() = default;
  // `phase` of global step `step` (counted from 1) ran from `begin` to `end`.
  virtual void on_phase(StepPhase phase, Clock::time_point begin, Clock::time_point end, int64_t step) = 0;
};

// Times one phase from construction to destruction (or stop()) and tells `hook`, if any.
class StepPhaseTimer {
 public:
  StepPhaseTimer(StepPhaseHook* hook, StepPhase phase, int64_t step)
      : hook_(hook), phase_(phase), step_(step), begin_(StepPhaseHook::Clock::now()) {}
  ~StepPhaseTimer() { stop(); }
  StepPhaseTimer(const StepPhaseTimer&) = delete;
  StepPhaseTimer& operator=(const StepPhaseTimer&) = delete;

  void stop() {
    if (hook_ != nullptr) hook_->on_phase(phase_, begin_, StepPhaseHook::Clock::now(), step_);
    hook_ = nullptr;
  }

 private:
  StepPhaseHook* hook_;
  StepPhase phase_;
  int64_t step_;
  StepPhaseHook::Clock::time_point begin_;
};

}  // namespace dpt::train
