#pragma once
// Which rank is slow, and in what. The ranks of a data-parallel job step in lockstep, so a slow
// rank does not show in the step time (every rank waits for it) but in its busy time: the step
// without the waits for the others (the tail of the gradient all-reduce, the metrics all-reduce,
// the parameter server's weights). Each rank sums its busy parts over a window of steps; at the
// window's end the sums ride in that step's metrics all-reduce as one row per rank (MetricSums::
// rank_rows), and every rank compares each rank's busy time with the median of the others'. A rank
// over it by the threshold for several windows in a row is named, with the part that is slow.
//
// A window lasts a few seconds whatever a step costs, so that a slow rank is named within seconds
// both for 10 ms and for 1 s steps: each window's step count comes from the window before (the
// slowest rank's busy time per step). Every rank derives it from the same summed table, whose
// cells each have one rank's value and zeros (sums exact in any order), so all ranks close the same
// windows at the same steps, as the shared all-reduce needs.
//
//   dpt::train::StragglerWatch watch(dpt::train::StragglerOptions(), comm->rank(), comm->size(), timeline);
//   StepPhaseTimer forward(&watch, StepPhase::Forward, step);     // the watch is the step's phase hook
//   local.rank_rows = watch.rows_to_send(step);                     // empty except at a window's end
//   MetricSums all = local.reduced(*comm);
//   if (auto slow = watch.judge(all.rank_rows, step)) log(*slow);   // a StragglerReport

#include <array>
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include <torch/arg.h>

#include "dptrain/train/logs/report.h"
#include "dptrain/train/logs/step_phase.h"

namespace dpt::train {

struct StragglerOptions {
  // A rank is slow when its busy time per step exceeds the median of the other ranks' by this
  // fraction (0.25: 25% slower). 0 turns the watch off.
  TORCH_ARG(double, threshold) = 0.25;
  // About how long a window lasts: its step count is this over the previous window's slowest
  // busy time per step (at least 5 steps; the first window is 10).
  TORCH_ARG(double, window_seconds) = 3.0;
  // Fixed steps per window instead, each ending at a multiple of it (reproducible tests).
  TORCH_ARG(std::optional<int64_t>, window_steps) = std::nullopt;
  // Consecutive slow windows before a rank is named (and again after as many more).
  TORCH_ARG(int64_t, windows) = 3;
};

// A step's parts in which a rank works rather than waits for the others.
enum class BusyPart { Data, CopyToDevice, Forward, BackwardCompute, Optimizer };
inline constexpr size_t kBusyParts = 5;
const char* name_of(BusyPart part);

class StragglerWatch : public StepPhaseHook {
 public:
  // Phases are passed on to `next` (the timeline), if any.
  StragglerWatch(StragglerOptions options, int rank, int world, StepPhaseHook* next);

  void on_phase(StepPhase phase, Clock::time_point begin, Clock::time_point end, int64_t step) override;

  // At the end of a window: a world x (1 + kBusyParts) table of zeros with this rank's row (steps,
  // then each part's milliseconds) filled, for the sum over ranks; otherwise empty. Every rank
  // decides alike from the step and the tables judged before.
  std::vector<double> rows_to_send(int64_t step) const;
  // Reads the summed table (empty: not a window's end) and starts the next window, sized from this
  // one. Returns the slow rank (without its host) when one has now been slow for a multiple of
  // `windows` windows in a row.
  std::optional<StragglerReport> judge(const std::vector<double>& table, int64_t step);
  // Every rank's busy milliseconds per step in the window judge() last read (NaN: no step).
  const std::vector<double>& last_busy_ms() const { return last_busy_ms_; }

 private:
  bool window_ends_at(int64_t step) const;

  StragglerOptions options_;
  int rank_;
  int world_;
  StepPhaseHook* next_;
  int64_t window_end_ = -1;  // the step that closes the window, once one was judged (time-sized windows)
  int64_t steps_ = 0;        // completed in this window
  std::array<double, kBusyParts> part_ms_{};
  std::vector<int64_t> slow_windows_;  // per rank, consecutive
  std::vector<int64_t> slow_steps_;    // per rank, the steps of those windows
  std::vector<double> last_busy_ms_;
};

}  // namespace dpt::train
