#pragma once
// Where each rank's training time goes, as a trace in the Chrome trace event format that
// chrome://tracing and Perfetto (ui.perfetto.dev) open: every step's parts on the training
// thread's track (waiting for data, copy to device, forward, backward with the wait for
// communication at its end, optimizer), validation and checkpoints (the copy to host memory), on
// a second track each gradient bucket's all-reduce from launch to completion, as Horovod's
// timeline shows its operations, and on a third each checkpoint's write in the background.
//
//   dpt::train::Timeline timeline(dpt::train::timeline_path("trace.json", rank), rank);
//   {
//     dpt::train::StepPhaseTimer forward(&timeline, StepPhase::Forward, 12);   // ends with the scope
//     ...
//   }
//   auto validating = timeline.span("validation", {{"epoch", 3}});
//   timeline.add(dpt::train::Timeline::Track::Communication, "bucket 0", launched, completed);
//   timeline.flush();                                            // at the end of each step
//
// Each rank writes its own file (pid = rank, so that files of several ranks concatenate into one
// trace); `dptrain report` merges them. Times are microseconds of the machine's monotonic clock
// (steady_clock): the ranks of one machine line up exactly, those of several machines by their
// clocks' offsets (each counts from its own boot). The file is a JSON array closed on destruction; a run that
// died leaves it unclosed, which the trace viewers accept, and a resumed run continues it.
// Writing never throws once the file is open (LogFile); the training thread alone writes. On
// CUDA the spans are the host's: kernels run behind them, and a span that waits for the GPU
// (the loss's item(), a collective's wait) holds the time the host waited.

#include <chrono>
#include <cstdint>
#include <filesystem>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "dptrain/train/logs/log_file.h"
#include "dptrain/train/logs/step_phase.h"

namespace dpt::train {

// What a span shows beside its name: {{"step", 12}, {"bytes", 1048576}}.
using TimelineArgs = std::vector<std::pair<std::string, int64_t>>;

// Rank `rank`'s file for the trace named `path`: "trace.json" -> "trace.rank1.json".
std::filesystem::path timeline_path(const std::filesystem::path& path, int rank);

class Timeline : public StepPhaseHook {
 public:
  using Clock = std::chrono::steady_clock;
  // The trace viewer's rows within a rank ("threads").
  enum class Track { Training = 1, Communication = 2, Checkpoint = 3 };

  // Opens (or continues) `path`; ConfigError when it cannot be written.
  Timeline(const std::filesystem::path& path, int rank);
  ~Timeline() override;
  Timeline(const Timeline&) = delete;
  Timeline& operator=(const Timeline&) = delete;

  // A span from `begin` to `end` on `track`, with `args` shown beside it.
  void add(Track track, std::string_view name, Clock::time_point begin, Clock::time_point end,
           const TimelineArgs& args = {});

  // A step's phase on the training track, named name_of(phase), with the step beside it.
  void on_phase(StepPhase phase, Clock::time_point begin, Clock::time_point end, int64_t step) override {
    add(Track::Training, name_of(phase), begin, end, {{"step", step}});
  }

  // A span on the training track from now until it is destroyed.
  class Span {
   public:
    Span(Timeline* timeline, std::string_view name, TimelineArgs args)
        : timeline_(timeline), name_(name), args_(std::move(args)), begin_(Clock::now()) {}
    ~Span() {
      if (timeline_ != nullptr) timeline_->add(Track::Training, name_, begin_, Clock::now(), args_);
    }
    Span(const Span&) = delete;
    Span& operator=(const Span&) = delete;

   private:
    Timeline* timeline_;
    std::string name_;
    TimelineArgs args_;
    Clock::time_point begin_;
  };
  [[nodiscard]] Span span(std::string_view name, TimelineArgs args = {}) {
    return Span(this, name, std::move(args));
  }

  // Writes what was recorded since the last flush (one write(2)).
  void flush();
  const std::filesystem::path& path() const { return file_.path(); }

 private:
  // Appends one event's JSON text.
  void write_event(const std::string& event);

  int rank_;
  LogFile file_;
  bool first_event_;  // no event in the file yet: the next one opens the array
  std::string pending_;
};

// A span that records nothing when there is no timeline.
inline std::optional<Timeline::Span> span_of(Timeline* timeline, std::string_view name,
                                             TimelineArgs args = {}) {
  if (timeline == nullptr) return std::nullopt;
  return std::optional<Timeline::Span>(std::in_place, timeline, name, std::move(args));
}

}  // namespace dpt::train
