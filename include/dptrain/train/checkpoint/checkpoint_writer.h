#pragma once
// Rank 0's checkpoint files, written beside training. A request's tensors are copied to host
// memory when it is submitted (the only time training waits), then a background thread pickles
// them and writes checkpoint.pt, and with it the epoch's file and model_best.pt, each atomically
// (checkpoint_file.h). At most one write is in flight: a request that finds one either waits for
// it or is skipped, as its caller decides. A write that fails is reported, never thrown: the files
// it would have replaced stay as they were, and training goes on. A state holding NaN or an
// infinity in any floating-point tensor is such a failure: it could only resume a diverged run.
//
//   dpt::train::CheckpointWriter writer(dpt::train::CheckpointWriterOptions().background(true));
//   dpt::train::CheckpointRequest request;
//   request.state = checkpoint.to_ivalue();   // still aliasing the live weights: copied here
//   request.dir = "run1";
//   request.step = 1200;
//   if (!writer.submit(std::move(request), dpt::train::WhenBusy::Skip)) { /* one is still writing */ }
//   for (const auto& write : writer.finished()) log(write);   // at each step: what has landed
//   writer.wait();                                          // before exiting

#include <chrono>
#include <cstdint>
#include <filesystem>
#include <functional>
#include <future>
#include <optional>
#include <string>
#include <vector>

#include <ATen/core/ivalue.h>
#include <torch/arg.h>

namespace dpt::train {

struct CheckpointWriterOptions {
  // Write on a background thread (the default); false: in submit(), as the caller's own work.
  TORCH_ARG(bool, background) = true;
  // The background thread at the lowest CPU priority (Linux): it then takes only the cycles
  // training leaves. At normal priority, where every core trains (a CPU job), each write took its
  // share of them from the steps around it: 17% of a 2-core run's images/s with a checkpoint every
  // 10 steps (bench/checkpoint). A write that runs longer only makes the next periodic checkpoint
  // wait or be skipped, as any write in flight does.
  TORCH_ARG(bool, low_priority) = true;
  // Called on the writing thread before each write starts: tests hold a write in flight with it.
  TORCH_ARG(std::function<void()>, before_write) = nullptr;
};

// What a checkpoint does to model_best.pt: replaces it (a new best top-1), becomes it only where
// there is none yet (a run's first checkpoint), or leaves it as it is (a model whose validation
// loss is not finite: it has diverged, and is never the best).
enum class BestModel { IfNone, Replace, Keep };

// One checkpoint: what to write and which files it becomes.
struct CheckpointRequest {
  c10::IValue state;  // what torch.load will return (TrainingCheckpoint::to_ivalue)
  std::filesystem::path dir;
  int64_t step = 0;  // the global step it was taken after, for the log
  // An epoch's checkpoint also becomes checkpoint_epoch<N>.pt, keeping the newest `keep` of them.
  std::optional<int64_t> epoch_done;
  int64_t keep = 3;
  BestModel best = BestModel::IfNone;
};

// What became of a request.
struct CheckpointWrite {
  using Clock = std::chrono::steady_clock;
  int64_t step = 0;
  std::filesystem::path file;  // <dir>/checkpoint.pt
  int64_t bytes = 0;
  double paused_s = 0;  // how long submit() held the training thread (the copy, or all of it)
  Clock::time_point began, ended;  // the write itself, on whichever thread did it
  std::string error;               // empty: every file was written
  bool ok() const { return error.empty(); }
  double write_s() const { return std::chrono::duration<double>(ended - began).count(); }
};

enum class WhenBusy { Wait, Skip };

class CheckpointWriter {
 public:
  explicit CheckpointWriter(CheckpointWriterOptions options = {});
  // Waits for the write in flight: a checkpoint is never abandoned half written.
  ~CheckpointWriter();
  CheckpointWriter(const CheckpointWriter&) = delete;
  CheckpointWriter& operator=(const CheckpointWriter&) = delete;

  // Takes the request's tensors out of the training's hands and starts writing; false (nothing
  // taken) when a write is in flight and `when_busy` is Skip.
  bool submit(CheckpointRequest request, WhenBusy when_busy);
  // Allocates and touches, on a background thread, the host memory a snapshot of a state shaped
  // like `like` takes, so that the first checkpoint's copy does not stall training while fresh
  // pages fault in (ResNet-50's 204.8 MB: 90 ms paused the first time, 30 ms after, on a VM where
  // page faults are slow). Reads only the tensors' shapes. Nothing when writing in the caller's
  // thread, or when a snapshot's memory is already kept.
  void prepare(const c10::IValue& like);
  // Whether prepare()'s memory is ready for the next snapshot (until that snapshot takes it).
  bool prepared() const;
  // Whether a write is in flight.
  bool busy() const;
  // The step of the write in flight, or of the last one submitted.
  int64_t last_step() const { return last_step_; }
  // Blocks until no write is in flight.
  void wait();
  // The writes that ended since the last call, oldest first.
  std::vector<CheckpointWrite> finished();

 private:
  void collect_in_flight();  // moves the ended write's outcome to done_

  CheckpointWriterOptions options_;
  std::future<CheckpointWrite> in_flight_;
  std::future<std::vector<at::Tensor>> preparing_;  // prepare()'s memory, taken by the first submit()
  std::vector<CheckpointWrite> done_;
  // The last snapshot's host tensors, reused by the next one whose tensors match: no new pages
  // to fault in for every checkpoint.
  std::vector<at::Tensor> spare_;
  std::vector<at::Tensor> writing_;  // the snapshot in flight's tensors
  int64_t last_step_ = -1;
};

}  // namespace dpt::train
