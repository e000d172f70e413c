#pragma once
// The logs of a training run in one call: the console progress display, plus metrics.jsonl and
// TensorBoard event files when an output folder is given. Rank 0 only.
//
//   std::vector<std::shared_ptr<dpt::train::TrainObserver>> observers = dpt::train::make_observers(
//       dpt::train::LogOptions().output_dir("runs/exp1").print_freq(10));
//   for (auto& o : observers) o->on_step(report);
//
// Which steps are logged is the same for all of them (logs_step in report.h).

#include <cstdint>
#include <cstdio>
#include <filesystem>
#include <memory>
#include <optional>
#include <vector>

#include <torch/arg.h>

#include "dptrain/train/logs/console_observer.h"
#include "dptrain/train/logs/report.h"

namespace dpt::train {

struct LogOptions {
  // Folder for metrics.jsonl and the TensorBoard event files, created when missing. Empty: the
  // console only.
  TORCH_ARG(std::filesystem::path, output_dir) = {};
  // Log every print_freq-th step of an epoch (-p/--print-freq); epoch summaries are always logged.
  TORCH_ARG(int64_t, print_freq) = 10;
  // Where the progress display goes; nullptr: no console output.
  TORCH_ARG(FileHandle, console) = stdout;
  // A self-updating progress bar (true) or plain lines (false). Unset: a bar when `console` is a
  // terminal.
  TORCH_ARG(std::optional<bool>, interactive) = std::nullopt;
  // <output_dir>/metrics.jsonl
  TORCH_ARG(bool, jsonl) = true;
  // <output_dir>/events.out.tfevents.*
  TORCH_ARG(bool, tensorboard) = true;
};

// The observers `options` asks for. Throws ConfigError for print_freq < 1 or an output folder
// that cannot be created or written, so a bad --output fails before training starts; afterwards
// they never throw (a failing disk is reported once on stderr and that log stops).
std::vector<std::shared_ptr<TrainObserver>> make_observers(const LogOptions& options);

}  // namespace dpt::train
