#pragma once
// The progress display on rank 0's console.
//
//   auto console = std::make_shared<dpt::train::ConsoleObserver>(
//       dpt::train::ConsoleOptions().print_freq(10));   // stdout; a bar when it is a terminal
//
// Plain lines (not a terminal), on the steps logs_step() picks, as imagenet/main.py prints them:
//   Epoch: [3][ 41/100]  Loss 1.2345  Acc@1 55.00  Acc@5 90.00  lr 0.1000  img/s 345.6  ETA 0:00:21
// A terminal gets one line per epoch instead, redrawn after every step ("\r", padded with spaces
// over a longer previous line) and ended with "\n" after the epoch's last step:
//   Epoch: [3] [========>...........]  41/100  Loss 1.2345  Acc@1 55.00  Acc@5 90.00  lr 0.1000  img/s 345.6  ETA 0:00:21
// Each finished train or validation pass, in both modes:
//   Epoch: [3] train  Loss 1.2345  Acc@1 55.00  Acc@5 90.00  samples 1281167  img/s 2345.6  time 546.2s
//   Epoch: [3] val    Loss 1.3456  Acc@1 52.10  Acc@5 88.00  samples 50000  img/s 4567.8  time 10.9s  bad images 2
// The step number is padded to the width of the epoch's step count; the epoch is 0-based like the
// reports; lr has 4 significant digits (0.1000, 0.0002500, 1.000e-05); ETA is h:mm:ss ("-:--:--"
// when unknown); "bad images" appears only when some were skipped.

#include <cstdint>
#include <cstdio>
#include <optional>
#include <string>

#include <torch/arg.h>

#include "dptrain/train/logs/report.h"

namespace dpt::train {

// FILE* as one name: TORCH_ARG's `const T&` would otherwise read as pointer to const FILE.
using FileHandle = std::FILE*;

struct ConsoleOptions {
  // Where the display goes.
  TORCH_ARG(FileHandle, out) = stdout;
  // Plain mode: a line every print_freq steps (see logs_step).
  TORCH_ARG(int64_t, print_freq) = 10;
  // Unset: the bar when `out` is a terminal (isatty), plain lines otherwise.
  TORCH_ARG(std::optional<bool>, interactive) = std::nullopt;
};

class ConsoleObserver : public TrainObserver {
 public:
  // ConfigError for print_freq < 1.
  explicit ConsoleObserver(const ConsoleOptions& options);

  void on_step(const StepReport& report) override;
  void on_epoch(const EpochReport& report) override;
  void on_finish() override;

  bool interactive() const { return interactive_; }

 private:
  // Ends a bar line left open by a pass that stopped before its last step.
  void end_open_line();
  void put(const std::string& text);

  FILE* out_;
  int64_t print_freq_;
  bool interactive_;
  size_t open_line_width_ = 0;  // characters of the bar line on screen; 0: none open
};

}  // namespace dpt::train
