#pragma once
// The flags `dptrain train` and `dptrain eval` share (data, model, loader, precision, process
// group), named as in pytorch/examples' imagenet/main.py, and their translation into TrainOptions.

#include <chrono>
#include <optional>
#include <string>

#include <CLI/CLI.hpp>
#include <nlohmann/json.hpp>

#include "dptrain/train/metrics.h"
#include "dptrain/train/train_options.h"

namespace dpt::cli {

struct RunFlags {
  std::string data;
  std::optional<std::string> arch;
  int workers = 4;
  int64_t batch_size = 256;
  int64_t print_freq = 10;
  uint64_t seed = 0;
  std::optional<int> gpu;
  bool dummy = false;
  int64_t dummy_train_size = 4000;
  int64_t dummy_val_size = 1001;
  std::optional<int> image_size;
  bool no_flip = false;
  bool amp = false;
  bool channels_last = false;
  bool deterministic = false;
  std::string bad_images = "skip";
  std::optional<int> world_size, rank;
  std::string dist_url = "env://";
  std::string dist_backend = "auto";
  double dist_timeout_s = 1800;
  std::optional<double> rendezvous_timeout_s;
  bool verbose_rendezvous = false;
};

void add_run_flags(CLI::App& app, RunFlags& flags);

// Seconds from a flag as the library's durations; nullopt stays unset.
std::optional<std::chrono::milliseconds> milliseconds(const std::optional<double>& seconds);

// Options for `arch` with every shared flag applied; the banner and the progress display go to
// stdout (the standard logs of train/observers.h, every print_freq steps).
train::TrainOptions run_options(const RunFlags& flags, const std::string& arch);

// Means and exact sums (loss, acc1, acc5, loss_sum, correct1, correct5, count), for the JSON line
// the commands end with.
nlohmann::json metrics_json(const train::MetricSums& sums);

}  // namespace dpt::cli
