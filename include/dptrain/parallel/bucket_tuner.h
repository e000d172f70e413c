#pragma once
// Chooses DDP's bucket size from measurements in a run's first steps, where the user set none:
// Horovod's autotune of its fusion threshold, reduced to the one knob that matters for a bucketed
// allreduce and a fixed sweep (a handful of steps, not a Bayesian search over hundreds). Each
// candidate cap runs `warmup_steps` unmeasured steps (its new buffers cost page faults) and then
// `measured_steps` measured ones; the cap with the shortest mean wins and stays. Small buckets
// start communicating early but pay a collective's latency each; large ones pay it less often but
// leave more to send once backward ends: which wins depends on the link and the model.
//
//   dpt::BucketTuner tuner(gradient_bytes);
//   reducer.rebucket(tuner.current_mb());
//   // after each reducing step, with the slowest rank's time (the same on every rank):
//   if (auto next = tuner.record(seconds)) reducer.rebucket(*next);
//   if (tuner.done()) log << tuner.describe();  // "10 MiB (1: 812 ms, 4: 790 ms, 10: 771 ms, ...)"

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include <torch/arg.h>

namespace dpt {

struct BucketTunerOptions {
  // The caps tried, in MiB, in this order; those past the model's whole gradient (one bucket all
  // the same) are left out but for the first of them, and with one left the tuner is done at once.
  TORCH_ARG(std::vector<double>, candidates_mb) = std::vector<double>{1, 4, 10, 25, 50};
  TORCH_ARG(int, warmup_steps) = 1;
  TORCH_ARG(int, measured_steps) = 2;
};

class BucketTuner {
 public:
  // `gradient_bytes`: the model's gradients, all buckets together.
  explicit BucketTuner(int64_t gradient_bytes, BucketTunerOptions options = {});

  // The cap the coming step runs with; the chosen one once done().
  double current_mb() const;
  bool done() const { return candidate_ >= candidates_.size(); }
  // Steps the sweep takes in all.
  int steps() const;

  // One reducing step's time under current_mb(). Returns the cap for the next step where it
  // changes (the next candidate, or at the end the chosen one).
  std::optional<double> record(double seconds);

  // The choice and every candidate's mean: "10 MiB (1: 812 ms, 4: 790 ms, 10: 771 ms, 25: 775 ms)".
  std::string describe() const;

 private:
  BucketTunerOptions options_;
  std::vector<double> candidates_;
  std::vector<double> mean_seconds_;  // per candidate measured so far
  size_t candidate_ = 0;              // the one running; candidates_.size() once done
  int steps_taken_ = 0;               // under the running candidate
  double chosen_mb_ = 0;
};

}  // namespace dpt
