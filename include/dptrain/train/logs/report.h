#pragma once
// What the trainer tells whoever watches it (progress display, JSONL metrics, TensorBoard): one
// StepReport per optimizer step and one EpochReport per finished train or validation pass. The
// numbers are already agreed across ranks; observers run on rank 0 only.
//
//   class MyObserver : public dpt::train::TrainObserver {
//     void on_step(const dpt::train::StepReport& r) override { std::printf("%g\n", r.loss); }
//   };

#include <algorithm>
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

namespace dpt::train {

// What every report has: where training stands and how well the model does there.
struct Report {
  int64_t epoch = 0;        // 0-based
  int64_t global_step = 0;  // optimizer steps since the run began, resumes included
  double loss = 0;          // mean loss: of this step's global batch, or of every sample of a pass
  double acc1 = 0;          // top-1 over the same samples, in percent
  double acc5 = 0;          // top-5, in percent
};

// The model's arithmetic behind a training throughput: FLOP/s of the model's own operations (2 x 3
// x its forward multiply-adds per image, models/multiply_adds.h) and, where the hardware's
// attainable rate is known (`dptrain bench-peak`), the fraction of it the run attains (MFU).
struct ModelRate {
  double flop_per_s = 0;      // 0: not counted
  std::optional<double> mfu;  // model FLOP/s over the peak of every unit the run uses, 0 to 1
};

struct StepReport : Report {
  int64_t step_in_epoch = 0;    // 1-based: steps finished in this epoch
  int64_t steps_per_epoch = 0;  // this epoch's total (after --max-steps)
  double lr = 0;                // the learning rate this step used
  double images_per_s = 0;      // global throughput, smoothed over recent steps
  ModelRate model_rate;         // at images_per_s
  double eta_s = 0;             // seconds until this epoch's train pass ends
};

// A finished train or validation pass, over all ranks.
struct EpochReport : Report {
  std::string phase;  // "train" or "val"
  int64_t samples = 0;
  double images_per_s = 0;
  ModelRate model_rate;  // at images_per_s; train passes only
  double seconds = 0;
  int64_t skipped_images = 0;  // bad images skipped by the loaders, all ranks
  bool standalone = false;     // a pass of its own (`dptrain eval`), in no epoch: `epoch` means nothing
};

// A rank whose busy time per step (the step without waiting for the other ranks) has stayed over
// the other ranks' median for `windows` windows in a row (StragglerWatch); times per step.
struct StragglerReport {
  int64_t global_step = 0;  // the step whose reduction showed it
  int rank = 0;
  std::string host;
  int64_t windows = 0;
  int64_t steps = 0;  // in those windows (the slow rank's)
  double busy_ms = 0;
  double others_busy_ms = 0;  // the median of the other ranks'
  std::string part;           // the part of the step furthest above the others' median
  double part_ms = 0;
  double others_part_ms = 0;
  std::vector<double> busy_ms_by_rank;  // this window's, every rank (NaN: no step completed)
};

// A new round of the job's workers, started by the launcher after the round before ended (a rank
// failed and the group restarted, or an elastic job re-formed), told after its first step.
struct MembershipReport {
  int round = 0;                  // the launcher's round (TORCHELASTIC_RESTART_COUNT)
  std::string cause;              // what ended the round before, as its launcher said it
  int world_size_before = 0;      // the checkpoint's; 0 when the round started without one
  int world_size = 0;
  int64_t resumed_step = 0;       // the global step it resumed from (0: a fresh start)
  // The highest global step metrics.jsonl recorded before this round (every print_freq-th step):
  // the steps lost are at least that less resumed_step.
  std::optional<int64_t> last_logged_step;
  double seconds = 0;             // from the end of the round before to this round's first step
  int64_t steps_lost() const { return last_logged_step ? std::max<int64_t>(0, *last_logged_step - resumed_step) : 0; }
};

class TrainObserver {
 public:
  virtual ~TrainObserver() = default;
  virtual void on_step(const StepReport& report) { (void)report; }
  virtual void on_epoch(const EpochReport& report) { (void)report; }
  virtual void on_straggler(const StragglerReport& report) { (void)report; }
  // At the end of each straggler window: every rank's busy milliseconds per step (the step without
  // waiting for the others; NaN for a rank without a completed step).
  virtual void on_rank_busy(int64_t global_step, const std::vector<double>& busy_ms_by_rank) {
    (void)global_step;
    (void)busy_ms_by_rank;
  }
  virtual void on_membership(const MembershipReport& report) { (void)report; }
  // Called once when training ends, normally or not, so files can be flushed and closed.
  virtual void on_finish() {}
};

// Which steps observers log: the first step of each epoch and every print_freq-th after it
// (step_in_epoch 1, 1 + print_freq, ...), as pytorch/examples' imagenet/main.py prints its progress.
inline bool logs_step(const StepReport& report, int64_t print_freq) {
  return (report.step_in_epoch - 1) % print_freq == 0;
}

// `print_freq`, or ConfigError when it is below 1.
int64_t checked_print_freq(int64_t print_freq);

// An observer of every print_freq-th step (logs_step) and of every pass: the files the logs write.
class PeriodicObserver : public TrainObserver {
 public:
  void on_step(const StepReport& report) final {
    if (logs_step(report, print_freq_)) log_step(report);
  }

 protected:
  // ConfigError when print_freq < 1.
  explicit PeriodicObserver(int64_t print_freq) : print_freq_(checked_print_freq(print_freq)) {}
  // The steps logs_step picks.
  virtual void log_step(const StepReport& report) = 0;

 private:
  int64_t print_freq_;
};

}  // namespace dpt::train
