#pragma once
// Scalars for TensorBoard: one event file per writer, readable by `tensorboard --logdir <dir>`,
// written without TensorFlow (see event_file.h for the bytes).
//
//   dpt::train::SummaryWriter writer(dpt::train::SummaryWriterOptions("runs/exp1"));
//   writer.add_scalar("train/loss", 1.25, /*step=*/100);
//
// The file is <dir>/events.out.tfevents.<unix time, 10 digits>.<hostname> (TensorFlow's name), or
// that name plus ".1", ".2"... when a file of that name exists already (two writers started in
// the same second): TensorBoard reads every file whose name contains "tfevents". Each event is
// written through at once, so TensorBoard shows it on its next reload. Write failures follow
// LogFile: reported once on stderr, never thrown.

#include <cstdint>
#include <filesystem>
#include <string>

#include <torch/arg.h>

#include "dptrain/train/logs/log_file.h"

namespace dpt::train {

struct SummaryWriterOptions {
  explicit SummaryWriterOptions(std::filesystem::path dir) : dir_(std::move(dir)) {}
  // The run folder; created when missing.
  TORCH_ARG(std::filesystem::path, dir);
  // The time in the file name and in each event.
  TORCH_ARG(WallClock, clock) = unix_time;
  // The host in the file name. Empty: this machine's name.
  TORCH_ARG(std::string, hostname) = "";
};

class SummaryWriter {
 public:
  // Creates the folder and the file with its file_version record; ConfigError when it cannot.
  explicit SummaryWriter(const SummaryWriterOptions& options);

  // One point of the chart `tag` ("train/loss": chart "loss" in section "train") at x = step.
  // TensorBoard stores scalars as float32.
  void add_scalar(const std::string& tag, double value, int64_t step);

  const std::filesystem::path& path() const { return file_.path(); }
  bool ok() const { return file_.ok(); }

 private:
  static LogFile create_event_file(const SummaryWriterOptions& options);

  WallClock clock_;
  LogFile file_;
};

}  // namespace dpt::train
