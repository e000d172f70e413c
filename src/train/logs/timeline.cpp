#include "dptrain/train/logs/timeline.h"

#include <algorithm>
#include <cmath>
#include <fstream>

#include <nlohmann/json.hpp>

#include "dptrain/common/error.h"

namespace dpt::train {
namespace fs = std::filesystem;
namespace {

constexpr std::string_view kArrayEnd = "\n]\n";
// A step's events are written together; a long pass without flushes still writes as it goes.
constexpr size_t kFlushBytes = 1 << 20;

// Whether `path` already holds events, after taking a previous run's closing bracket away so
// that this run's events continue the same array.
bool continue_trace(const fs::path& path) {
  std::error_code error;
  const auto size = fs::file_size(path, error);
  if (error || size == 0) return false;
  if (size >= kArrayEnd.size()) {
    std::ifstream in(path, std::ios::binary);
    in.seekg(static_cast<std::streamoff>(size - kArrayEnd.size()));
    std::string tail(kArrayEnd.size(), '\0');
    in.read(tail.data(), static_cast<std::streamsize>(tail.size()));
    if (tail == kArrayEnd) fs::resize_file(path, size - kArrayEnd.size(), error);
  }
  return true;
}

// A metadata event: names and order of the viewer's rows. `tid` 0: the rank's own.
std::string metadata(std::string_view what, int pid, int tid, nlohmann::ordered_json args) {
  nlohmann::ordered_json event = {{"name", what}, {"ph", "M"}, {"pid", pid}};
  if (tid > 0) event["tid"] = tid;
  event["args"] = std::move(args);
  return event.dump();
}

}  // namespace

fs::path timeline_path(const fs::path& path, int rank) {
  fs::path out = path;
  out.replace_filename(str(path.stem().string(), ".rank", rank, path.extension().string()));
  return out;
}

Timeline::Timeline(const fs::path& path, int rank)
    : rank_(rank),
      file_(LogFile::append_creating_folder(path, "timeline", "--timeline")),
      first_event_(!continue_trace(path)) {
  write_event(metadata("process_name", rank, 0, {{"name", str("rank ", rank)}}));
  write_event(metadata("process_sort_index", rank, 0, {{"sort_index", rank}}));
  write_event(metadata("thread_name", rank, static_cast<int>(Track::Training), {{"name", "training"}}));
  write_event(metadata("thread_name", rank, static_cast<int>(Track::Communication), {{"name", "communication"}}));
  write_event(metadata("thread_name", rank, static_cast<int>(Track::Checkpoint), {{"name", "checkpoint writer"}}));
  flush();
}

Timeline::~Timeline() {
  flush();
  file_.write(kArrayEnd);
}

void Timeline::add(Track track, std::string_view name, Clock::time_point begin, Clock::time_point end,
                   const TimelineArgs& args) {
  const double begin_us = std::chrono::duration<double, std::micro>(begin.time_since_epoch()).count();
  const double duration_us = std::max(0.0, std::chrono::duration<double, std::micro>(end - begin).count());
  nlohmann::ordered_json event = {{"name", name},
                                  {"ph", "X"},
                                  {"pid", rank_},
                                  {"tid", static_cast<int>(track)},
                                  // Whole nanoseconds: shorter lines, and as precise as the clocks.
                                  {"ts", std::round(begin_us * 1e3) / 1e3},
                                  {"dur", std::round(duration_us * 1e3) / 1e3}};
  if (!args.empty()) {
    auto& shown = event["args"] = nlohmann::ordered_json::object();
    for (const auto& [key, value] : args) shown[key] = value;
  }
  write_event(event.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace));
}

void Timeline::write_event(const std::string& event) {
  pending_ += first_event_ ? "[\n" : ",\n";
  first_event_ = false;
  pending_ += event;
  if (pending_.size() >= kFlushBytes) flush();
}

void Timeline::flush() {
  if (pending_.empty()) return;
  file_.write(pending_);
  pending_.clear();
}

}  // namespace dpt::train
