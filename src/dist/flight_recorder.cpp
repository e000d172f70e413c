#include "dptrain/dist/flight_recorder.h"

#include <algorithm>

#include <fmt/format.h>
#include <fmt/ranges.h>

#include "dptrain/common/error.h"

namespace dpt::dist {

namespace {

thread_local std::string current_label;

double milliseconds_between(CollectiveRecord::Clock::time_point from, CollectiveRecord::Clock::time_point to) {
  return std::chrono::duration<double, std::milli>(to - from).count();
}

}  // namespace

std::string CollectiveRecord::describe(Clock::time_point now) const {
  std::string text = fmt::format("#{} {}", seq, operation);
  if (!label.empty()) text += " " + label;
  if (!shape.empty()) text += fmt::format(" [{}] {}", fmt::join(shape, ", "), c10::toString(dtype));
  if (step >= 0) text += fmt::format(" step {}", step);
  switch (state) {
    case State::Started: return text + fmt::format(": started {:.1f} ms ago, not completed", milliseconds_between(started, now));
    case State::Completed: return text + fmt::format(": completed in {:.1f} ms", milliseconds_between(started, ended));
    case State::Failed: return text + fmt::format(": FAILED after {:.1f} ms", milliseconds_between(started, ended));
  }
  return text;
}

FlightRecorder::FlightRecorder(size_t capacity) : capacity_(capacity) {
  DPT_CHECK(capacity > 0, ConfigError, "a flight recorder needs room for at least one collective");
  ring_.reserve(capacity);
}

uint64_t FlightRecorder::start(std::string operation, const at::Tensor& tensor) {
  CollectiveRecord record;
  record.operation = std::move(operation);
  record.label = CollectiveLabel::current();
  if (tensor.defined()) {
    record.shape = tensor.sizes().vec();
    record.dtype = tensor.scalar_type();
  }
  record.started = CollectiveRecord::Clock::now();
  std::lock_guard<std::mutex> lock(mutex_);
  record.seq = ++last_seq_;
  record.step = step_;
  if (ring_.size() < capacity_) {
    ring_.push_back(std::move(record));
  } else {
    ring_[(record.seq - 1) % capacity_] = std::move(record);  // over the oldest
  }
  return last_seq_;
}

void FlightRecorder::end(uint64_t seq, CollectiveRecord::State state) {
  const auto now = CollectiveRecord::Clock::now();
  std::lock_guard<std::mutex> lock(mutex_);
  const size_t slot = (seq - 1) % capacity_;
  if (slot >= ring_.size() || ring_[slot].seq != seq) return;
  ring_[slot].state = state;
  ring_[slot].ended = now;
}

void FlightRecorder::set_step(int64_t step) {
  std::lock_guard<std::mutex> lock(mutex_);
  step_ = step;
}

std::vector<CollectiveRecord> FlightRecorder::records() const {
  std::lock_guard<std::mutex> lock(mutex_);
  std::vector<CollectiveRecord> ordered = ring_;
  std::sort(ordered.begin(), ordered.end(),
            [](const CollectiveRecord& a, const CollectiveRecord& b) { return a.seq < b.seq; });
  return ordered;
}

std::string FlightRecorder::describe(const std::string& indent) const {
  const auto now = CollectiveRecord::Clock::now();
  std::string text;
  for (const auto& record : records()) text += indent + record.describe(now) + "\n";
  return text;
}

CollectiveLabel::CollectiveLabel(std::string label) : previous_(std::move(current_label)) {
  current_label = std::move(label);
}

CollectiveLabel::~CollectiveLabel() { current_label = std::move(previous_); }

const std::string& CollectiveLabel::current() { return current_label; }

}  // namespace dpt::dist
