#pragma once
// Metrics as JSON lines in <dir>/metrics.jsonl, for scripts and `tail -f`.
//
//   auto metrics = std::make_shared<dpt::train::JsonlObserver>(
//       dpt::train::JsonlOptions("runs/exp1").print_freq(10));
//
// One object per line, keys in this order; each line is written whole as soon as it is known. A
// step record for each step logs_step() picks, and one record per finished train or val pass:
//   {"phase":"train_step","epoch":3,"step":41,"steps":100,"global_step":341,"loss":1.2345,
//    "acc1":55.0,"acc5":90.0,"lr":0.1,"img_per_s":345.6,"eta_s":21.0,"time":1763700000.25}
//   {"phase":"train","epoch":3,"global_step":400,"loss":1.2345,"acc1":55.0,"acc5":90.0,
//    "samples":50000,"img_per_s":345.6,"seconds":144.7,"skipped_images":0,"time":1763700000.25}
// ("phase":"val" for validation). Numbers are written in the shortest form that reads back
// exactly; NaN and infinities as null. "time" is Unix seconds. The file is appended to, never
// truncated, so a resumed run continues its log.

#include <cstdint>
#include <filesystem>

#include <optional>

#include <torch/arg.h>

#include "dptrain/train/logs/log_file.h"
#include "dptrain/train/logs/report.h"

namespace dpt::train {

inline constexpr const char* kMetricsFileName = "metrics.jsonl";

// The highest global step of the step records in `dir`'s metrics.jsonl (a torn last line is
// passed over), or nullopt when it has none: how far a run got before it was restarted.
std::optional<int64_t> last_logged_step(const std::filesystem::path& dir);

struct JsonlOptions {
  explicit JsonlOptions(std::filesystem::path dir) : dir_(std::move(dir)) {}
  // The folder of metrics.jsonl; created when missing.
  TORCH_ARG(std::filesystem::path, dir);
  // A step record every print_freq steps (see logs_step).
  TORCH_ARG(int64_t, print_freq) = 10;
  // The "time" of each record.
  TORCH_ARG(WallClock, clock) = unix_time;
};

class JsonlObserver : public PeriodicObserver {
 public:
  // ConfigError when print_freq < 1 or the file cannot be opened.
  explicit JsonlObserver(const JsonlOptions& options);
  const std::filesystem::path& path() const { return file_.path(); }

  void on_epoch(const EpochReport& report) override;
  void on_straggler(const StragglerReport& report) override;
  void on_rank_busy(int64_t global_step, const std::vector<double>& busy_ms_by_rank) override;
  void on_membership(const MembershipReport& report) override;

 private:
  void log_step(const StepReport& report) override;

  WallClock clock_;
  LogFile file_;
};

}  // namespace dpt::train
