#pragma once
// One self-contained HTML page about a training run, from the files it left: metrics.jsonl (loss,
// top-1, learning rate and images/s by step and by epoch) and, when there is one, the timeline of
// every rank (the mean step broken into its parts, per rank). No script and nothing fetched: the
// charts are inline SVG, so the page opens anywhere, offline, and reads the same in any browser.
//
//   auto report = dpt::report::read_run(dpt::report::RunFiles("runs/exp1").timeline("runs/exp1/trace.json"));
//   std::ofstream("runs/exp1/report.html") << dpt::report::render_report(report);
//
// Part of the command line (`dptrain report`), not of the library: it reads what the train
// layer's logs wrote (metrics.jsonl, the timeline's StepPhase names) and owns the page's look.
//
// Every plotted series is a <polyline class="series" data-series="NAME"> inside an
// <svg class="chart"> whose data-x-min/-max, data-y-min/-max and data-left/-right/-top/-bottom
// give the axes: a reader (or a test) maps each point back to its value.

#include <cstdint>
#include <filesystem>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include <torch/arg.h>

#include "dptrain/train/logs/report.h"
#include "dptrain/train/logs/step_phase.h"
#include "svg_chart.h"

namespace dpt::report {

struct RunFiles {
  explicit RunFiles(std::filesystem::path dir) : dir_(std::move(dir)) {}
  // The run's folder: metrics.jsonl is read from it.
  TORCH_ARG(std::filesystem::path, dir);
  // The --timeline path the run was given (its ranks' files are timeline_path(this, rank)).
  // Unset: <dir>/timeline.json, when rank 0's file exists there.
  TORCH_ARG(std::optional<std::filesystem::path>, timeline) = std::nullopt;
};

// One rank's mean step, from its timeline.
struct StepBreakdown {
  int rank = 0;
  int64_t steps = 0;                    // steps averaged
  double step_ms = 0;                   // the whole step
  std::map<train::StepPhase, double> parts;    // mean ms of each phase (absent in the trace: 0)
  int64_t buckets = 0;                  // gradient buckets per step
  double bucket_ms = 0;                 // mean time of one bucket's all-reduce, launch to completion
  double gradient_mb = 0;               // the buckets' gradients per step, MB
  double reduced_mb = 0;                // what the comm hook reduced for them per step, MB (less if compressed)
};

struct RunRecords {
  std::filesystem::path dir;
  // Logged steps ("train_step" records), by global step.
  Points step_loss, step_acc1, step_lr, step_images_per_s, step_mfu;
  // Finished passes, at their epoch's last global step.
  Points train_loss, train_acc1, val_loss, val_acc1, val_ema_acc1, epoch_images_per_s, epoch_mfu;
  // The model's FLOP/s of the last training pass that counted them (0: none did).
  double last_model_flop_per_s = 0;
  std::vector<StepBreakdown> ranks;  // empty without a timeline
  // Each rank's busy milliseconds per step, one point per straggler window ("rank_busy" records).
  std::vector<Points> rank_busy_ms;
  // The ranks named slow ("straggler" records), in the order they were named.
  std::vector<train::StragglerReport> stragglers;
  // Each round after the first ("membership" records: a restart, a re-formation), in order.
  std::vector<train::MembershipReport> rounds;
};

// MFU points are in percent of the measured peak. Reads the run's metrics and timeline. DataError when metrics.jsonl is missing or a line does
// not parse (naming the file and line), or a timeline file is not a trace.
RunRecords read_run(const RunFiles& files);

// The HTML page.
std::string render_report(const RunRecords& run);

}  // namespace dpt::report
