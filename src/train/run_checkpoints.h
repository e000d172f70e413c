#pragma once
// A training run's checkpoints, as the trainer takes them: whether --checkpoint-every or
// --checkpoint-minutes asks for one, rank 0's writer (made on first use, after removing what
// killed writes left), and a log line for what each write cost or why it failed, as it lands.
// What a checkpoint holds is the trainer's to gather; any rank may ask whether one is due, only
// the rank that writes calls prepare() and save().

#include <chrono>
#include <cstdint>
#include <memory>
#include <optional>
#include <ostream>

#include "dptrain/train/checkpoint/checkpoint_writer.h"
#include "dptrain/train/logs/timeline.h"
#include "dptrain/train/train_options.h"

namespace dpt::train {

class RunCheckpoints {
 public:
  // Why a checkpoint is written: a periodic one is skipped while the previous write is still in
  // flight; the others wait for it.
  enum class Cause { Periodic, Epoch, Stop };

  // `writer` says how rank 0's writer writes (CheckpointOptions::in_background()'s thread or the
  // caller's). `log` and `timeline` may be null; both outlive this.
  RunCheckpoints(CheckpointOptions options, CheckpointWriterOptions writer, std::ostream* log, Timeline* timeline);

  // Whether the run writes checkpoints at all: it has an output folder.
  bool enabled() const { return !options_.output_dir().empty(); }
  // Whether --checkpoint-every's steps have come round after global step `global_step`.
  bool steps_due(int64_t global_step) const;
  // Whether --checkpoint-minutes have passed since the last checkpoint was taken, on this
  // process's clock (or since the run began).
  bool time_due() const;

  // Whether prepare() would do anything: the run writes periodic checkpoints and none has been
  // prepared yet.
  bool wants_preparing() const;
  // The writer's host memory for a state shaped like `state` made ready in the background, once,
  // so that the first periodic checkpoint pauses training no longer than the next ones.
  void prepare(const c10::IValue& state);
  // Hands `state`, taken after global step `global_step`, to the writer; an epoch's checkpoint
  // names the epoch done. A periodic one is skipped, with a line in the log, while a write is in
  // flight.
  void save(c10::IValue state, int64_t global_step, std::optional<int64_t> epoch_done, BestModel best, Cause cause);
  // Logs the writes that have ended since the last call, and puts them on the timeline.
  void report();
  // Waits for the write in flight and reports it.
  void finish();
  // Throws CheckpointError when the newest write failed: a failure mid-run is logged and training
  // goes on, but at the run's end nothing newer will replace it.
  void check_last_written() const;

 private:
  using Clock = std::chrono::steady_clock;

  CheckpointWriter& writer();

  CheckpointOptions options_;
  CheckpointWriterOptions writer_options_;
  std::ostream* log_;
  Timeline* timeline_;
  std::unique_ptr<CheckpointWriter> writer_;  // made by the first prepare() or save()
  bool prepared_ = false;
  Clock::time_point last_taken_ = Clock::now();
  std::optional<CheckpointWrite> last_write_;  // the newest write that ended
};

}  // namespace dpt::train
