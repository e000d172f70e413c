#pragma once
// Training curves for TensorBoard: `tensorboard --logdir <dir>`.
//
//   auto board = std::make_shared<dpt::train::TensorBoardObserver>(
//       dpt::train::TensorBoardOptions("runs/exp1").print_freq(10));
//
// Scalars, all with x = the global step, so step curves and epoch points share one axis:
//   each step logs_step() picks:  train/loss train/acc1 train/acc5 train/lr train/img_per_s
//   each finished train pass:     train_epoch/loss train_epoch/acc1 train_epoch/acc5
//                                 train_epoch/img_per_s
//   each finished val pass:       val/loss val/acc1 val/acc5 val/img_per_s
// Accuracies are in percent. Every run (a resume included) writes a new event file in the same
// folder; TensorBoard joins them into one run.

#include <cstdint>
#include <filesystem>

#include <torch/arg.h>

#include "dptrain/train/logs/report.h"
#include "dptrain/train/logs/summary_writer.h"

namespace dpt::train {

struct TensorBoardOptions {
  explicit TensorBoardOptions(std::filesystem::path dir) : writer_(std::move(dir)) {}
  // The event file's folder, clock and host name.
  TORCH_ARG(SummaryWriterOptions, writer);
  // Step scalars every print_freq steps (see logs_step).
  TORCH_ARG(int64_t, print_freq) = 10;
};

// Step scalars under train/, pass scalars under train_epoch/ and val/.
class TensorBoardObserver : public PeriodicObserver {
 public:
  // ConfigError when print_freq < 1 or the event file cannot be created.
  explicit TensorBoardObserver(const TensorBoardOptions& options);
  void on_epoch(const EpochReport& report) override;
  const std::filesystem::path& path() const { return writer_.path(); }

 private:
  void log_step(const StepReport& report) override;
  // loss, acc1 and acc5 of `report`, under `section`.
  void add_scores(const std::string& section, const Report& report);

  SummaryWriter writer_;
};

}  // namespace dpt::train
