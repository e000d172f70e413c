#pragma once
// The flags `dptrain train` and `dptrain eval` share (data, model, loader, precision, process
// group), named as in pytorch/examples' imagenet/main.py. Each flag is bound to the TrainOptions
// field it sets, so a new option is its field and its flag, nothing in between.

#include <chrono>
#include <optional>
#include <string>
#include <type_traits>

#include <CLI/CLI.hpp>
#include <nlohmann/json.hpp>

#include "dptrain/common/error.h"
#include "dptrain/data/shard_cache.h"
#include "dptrain/train/metrics.h"
#include "dptrain/train/train_options.h"
#include "seconds_flag.h"

namespace dpt::cli {

// The options a command's flags fill in, with the command line's own defaults: the banner and
// the progress display go to stdout (the standard logs of train/logs/observers.h).
train::TrainOptions command_line_options();

// Binds the shared flags to `options`, which must outlive the parse; -a/--arch is the option
// named "--arch" (`dptrain eval` asks whether it was given).
void add_run_flags(CLI::App& app, train::TrainOptions& options);

// --data-cache FOLDER, --data-cache-size GIB and --fetch-streams N, for the commands that read
// remote shard sets; `cache` must outlive the parse.
void add_shard_cache_flags(CLI::App& app, data::ShardCacheOptions& cache);

// A flag whose text the library parses into `target` (optim::parse_lr_decay, parse_parallel_mode);
// the parser's ConfigError, which names the accepted values, becomes the command line's error.
// An optional target (unset: a default decided later, e.g. the model's) shows no default.
template <typename T, typename Target>
CLI::Option* add_parsed_option(CLI::App& app, const std::string& name, Target& target, T (*parse)(const std::string&),
                               const std::string& help) {
  auto assign = [&target, parse, name](const std::string& text) {
    try {
      target = parse(text);
    } catch (const ConfigError& e) {
      throw CLI::ValidationError(name, e.what());
    }
  };
  CLI::Option* option = app.add_option_function<std::string>(name, assign, help);
  if constexpr (std::is_same_v<Target, T>) option->default_str(to_string(target));
  return option;
}

// A switch and the flags that set its options (--model-ema with --model-ema-steps): the sub-flags
// fill values() whatever the order on the command line, and finish() hands them to the optional
// TrainOptions field only when the switch was given.
template <typename T>
class OptionalFlags {
 public:
  explicit OptionalFlags(std::optional<T>& target) : target_(target) {}
  OptionalFlags(const OptionalFlags&) = delete;
  OptionalFlags& operator=(const OptionalFlags&) = delete;

  T& values() { return values_; }
  void enable() { enabled_ = true; }
  // A flag that turns the group on.
  CLI::Option* add_switch(CLI::App& app, const std::string& name, const std::string& help) {
    return app.add_flag_callback(name, [this] { enable(); }, help);
  }
  void finish() {
    if (enabled_) target_ = values_;
  }

 private:
  std::optional<T>& target_;
  T values_;
  bool enabled_ = false;
};

// Means and exact sums (loss, acc1, acc5, loss_sum, correct1, correct5, count), for the JSON line
// the commands end with.
nlohmann::json metrics_json(const train::MetricSums& sums);

}  // namespace dpt::cli
