#include "dptrain/train/straggler_watch.h"

#include <algorithm>
#include <cmath>

#include "dptrain/common/error.h"

namespace dpt::train {
namespace {

constexpr size_t kRowWidth = 1 + kBusyParts;  // steps, then each part's milliseconds
// Below this excess per step, a difference is scheduling noise however large its ratio.
constexpr double kNoiseMs = 1.0;
// Time-sized windows: the first one, before any step was timed, and the fewest steps of one, below
// which a single slow step (a checkpoint's copy, a page fault storm) would weigh too much.
constexpr int64_t kFirstWindowSteps = 10;
constexpr int64_t kMinWindowSteps = 5;

double milliseconds(StepPhaseHook::Clock::duration d) { return std::chrono::duration<double, std::milli>(d).count(); }

double median(std::vector<double> values) {
  std::sort(values.begin(), values.end());
  const size_t n = values.size();
  return n % 2 == 1 ? values[n / 2] : (values[n / 2 - 1] + values[n / 2]) / 2;
}

}  // namespace

const char* name_of(BusyPart part) {
  switch (part) {
    case BusyPart::Data: return "data (waiting for the loader)";
    case BusyPart::CopyToDevice: return "copy to device";
    case BusyPart::Forward: return "forward";
    case BusyPart::BackwardCompute: return "backward (compute)";
    case BusyPart::Optimizer: return "optimizer";
  }
  return "unknown";
}

StragglerWatch::StragglerWatch(StragglerOptions options, int rank, int world, StepPhaseHook* next)
    : options_(options),
      rank_(rank),
      world_(world),
      next_(next),
      slow_windows_(static_cast<size_t>(world), 0),
      slow_steps_(static_cast<size_t>(world), 0) {
  DPT_CHECK(options_.threshold() >= 0, ConfigError, "the straggler threshold must be 0 (off) or more, got ",
            options_.threshold());
  DPT_CHECK(options_.window_steps().value_or(1) >= 1 && options_.windows() >= 1, ConfigError,
            "a straggler window needs at least one step and one window, got ", options_.window_steps().value_or(1),
            " and ", options_.windows());
  DPT_CHECK(options_.window_seconds() > 0, ConfigError, "a straggler window must last a positive time, got ",
            options_.window_seconds(), " s");
}

void StragglerWatch::on_phase(StepPhase phase, Clock::time_point begin, Clock::time_point end, int64_t step) {
  if (next_ != nullptr) next_->on_phase(phase, begin, end, step);
  const double ms = milliseconds(end - begin);
  auto add = [&](BusyPart part, double value) { part_ms_[static_cast<size_t>(part)] += value; };
  switch (phase) {
    case StepPhase::Data: add(BusyPart::Data, ms); break;
    case StepPhase::CopyToDevice: add(BusyPart::CopyToDevice, ms); break;
    case StepPhase::Forward: add(BusyPart::Forward, ms); break;
    case StepPhase::Backward: add(BusyPart::BackwardCompute, ms); break;
    // Inside Backward: waiting for the other ranks' gradients.
    case StepPhase::WaitForCommunication: add(BusyPart::BackwardCompute, -ms); break;
    case StepPhase::Optimizer:
      add(BusyPart::Optimizer, ms);
      ++steps_;  // the step's last part
      break;
    case StepPhase::Synchronize:
    case StepPhase::MetricsAllReduce: break;  // waits for the others
  }
}

bool StragglerWatch::window_ends_at(int64_t step) const {
  if (options_.window_steps()) return step % *options_.window_steps() == 0;
  return window_end_ < 0 ? step % kFirstWindowSteps == 0 : step >= window_end_;
}

std::vector<double> StragglerWatch::rows_to_send(int64_t step) const {
  if (options_.threshold() <= 0 || world_ < 2 || !window_ends_at(step)) return {};
  std::vector<double> table(static_cast<size_t>(world_) * kRowWidth, 0.0);
  double* row = table.data() + static_cast<size_t>(rank_) * kRowWidth;
  row[0] = static_cast<double>(steps_);
  std::copy(part_ms_.begin(), part_ms_.end(), row + 1);
  return table;
}

std::optional<StragglerReport> StragglerWatch::judge(const std::vector<double>& table, int64_t step) {
  if (table.empty()) return std::nullopt;
  DPT_ASSERT(table.size() == static_cast<size_t>(world_) * kRowWidth, "a straggler table of ", table.size(),
             " values for ", world_, " ranks");
  steps_ = 0;
  part_ms_.fill(0);
  // Per rank and step: each part and their sum; ranks without a completed step have no say.
  std::vector<std::array<double, kBusyParts>> parts(static_cast<size_t>(world_));
  std::vector<double> busy(static_cast<size_t>(world_), NAN);
  for (size_t r = 0; r < parts.size(); ++r) {
    const double* row = table.data() + r * kRowWidth;
    if (row[0] < 1) continue;
    busy[r] = 0;
    for (size_t p = 0; p < kBusyParts; ++p) busy[r] += parts[r][p] = row[1 + p] / row[0];
  }
  auto others = [&](size_t rank, auto value_of) {
    std::vector<double> values;
    for (size_t r = 0; r < parts.size(); ++r) {
      if (r != rank && !std::isnan(busy[r])) values.push_back(value_of(r));
    }
    return values;
  };
  last_busy_ms_ = busy;
  const double slowest_ms = *std::max_element(busy.begin(), busy.end(), [](double a, double b) {
    return std::isnan(a) || (!std::isnan(b) && a < b);
  });
  if (!options_.window_steps()) {
    const double steps = slowest_ms > 0 ? std::ceil(options_.window_seconds() * 1000.0 / slowest_ms) : 0;
    window_end_ = step + std::max<int64_t>(kMinWindowSteps, static_cast<int64_t>(std::min(steps, 1e9)));
  }
  std::optional<StragglerReport> named;
  double named_ratio = 0;
  for (size_t r = 0; r < parts.size(); ++r) {
    const auto others_busy = others(r, [&](size_t o) { return busy[o]; });
    if (std::isnan(busy[r]) || others_busy.empty()) continue;
    const double typical = median(others_busy);
    if (busy[r] <= typical * (1 + options_.threshold()) || busy[r] - typical < kNoiseMs) {
      slow_windows_[r] = 0;
      slow_steps_[r] = 0;
      continue;
    }
    slow_steps_[r] += static_cast<int64_t>(table[r * kRowWidth]);
    if (++slow_windows_[r] % options_.windows() != 0) continue;
    if (named && busy[r] / typical <= named_ratio) continue;  // the slowest is named
    named_ratio = busy[r] / typical;
    StragglerReport s;
    s.rank = static_cast<int>(r);
    s.global_step = step;
    s.windows = slow_windows_[r];
    s.steps = slow_steps_[r];
    s.busy_ms = busy[r];
    s.others_busy_ms = typical;
    double worst_excess = -INFINITY;
    for (size_t p = 0; p < kBusyParts; ++p) {
      const double others_part = median(others(r, [&](size_t o) { return parts[o][p]; }));
      if (parts[r][p] - others_part > worst_excess) {
        worst_excess = parts[r][p] - others_part;
        s.part = name_of(static_cast<BusyPart>(p));
        s.part_ms = parts[r][p];
        s.others_part_ms = others_part;
      }
    }
    s.busy_ms_by_rank = busy;
    named = s;
  }
  return named;
}

}  // namespace dpt::train
