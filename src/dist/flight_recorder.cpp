#include "dptrain/dist/flight_recorder.h"

#include <algorithm>
#include <utility>

#include <fmt/format.h>
#include <fmt/ranges.h>

#include "dptrain/common/error.h"

namespace dpt::dist {

namespace {

thread_local std::string current_label;
thread_local bool agreement_implied = false;

double milliseconds_between(CollectiveRecord::Clock::time_point from, CollectiveRecord::Clock::time_point to) {
  return std::chrono::duration<double, std::milli>(to - from).count();
}

}  // namespace

std::string CollectiveRecord::identity(bool with_step) const {
  std::string text = point_to_point() ? fmt::format("p2p #{} {} {} rank {}", seq, operation,
                                                   operation == "recv" ? "from" : "to", peer)
                                     : fmt::format("#{} {}", seq, operation);
  if (!label.empty()) text += " " + label;
  if (!shape.empty()) text += fmt::format(" [{}] {}", fmt::join(shape, ", "), c10::toString(dtype));
  if (with_step && step >= 0) text += fmt::format(" step {}", step);
  return text;
}

std::string CollectiveRecord::describe(Clock::time_point now) const {
  const std::string text = identity();
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

uint64_t FlightRecorder::start(std::string operation, const at::Tensor& tensor, int peer, CollectiveRecord* copy) {
  CollectiveRecord record;
  record.operation = std::move(operation);
  record.peer = peer;
  record.label = CollectiveLabel::current();
  record.agreement_implied = AgreementImplied::active();
  if (tensor.defined()) {
    record.shape = tensor.sizes().vec();
    record.dtype = tensor.scalar_type();
  }
  record.started = CollectiveRecord::Clock::now();
  std::lock_guard<std::mutex> lock(mutex_);
  record.seq = record.point_to_point() ? ++last_point_to_point_ : ++last_collective_;
  record.step = step_;
  if (copy != nullptr) *copy = record;
  Slot slot{++last_id_, std::move(record)};
  if (ring_.size() < capacity_) {
    ring_.push_back(std::move(slot));
  } else {
    ring_[(slot.id - 1) % capacity_] = std::move(slot);  // over the oldest
  }
  return last_id_;
}

void FlightRecorder::end(uint64_t id, CollectiveRecord::State state) {
  const auto now = CollectiveRecord::Clock::now();
  std::lock_guard<std::mutex> lock(mutex_);
  const size_t slot = (id - 1) % capacity_;
  if (slot >= ring_.size() || ring_[slot].id != id) return;
  ring_[slot].record.state = state;
  ring_[slot].record.ended = now;
}

std::optional<CollectiveRecord> FlightRecorder::entry(uint64_t id) const {
  std::lock_guard<std::mutex> lock(mutex_);
  const size_t slot = (id - 1) % capacity_;
  if (slot >= ring_.size() || ring_[slot].id != id) return std::nullopt;
  return ring_[slot].record;
}

void FlightRecorder::set_step(int64_t step) {
  std::lock_guard<std::mutex> lock(mutex_);
  step_ = step;
}

std::vector<CollectiveRecord> FlightRecorder::records() const {
  std::vector<Slot> slots;
  {
    std::lock_guard<std::mutex> lock(mutex_);
    slots = ring_;
  }
  std::sort(slots.begin(), slots.end(), [](const Slot& a, const Slot& b) { return a.id < b.id; });
  std::vector<CollectiveRecord> ordered;
  for (auto& slot : slots) ordered.push_back(std::move(slot.record));
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

AgreementImplied::AgreementImplied() : previous_(std::exchange(agreement_implied, true)) {}

AgreementImplied::~AgreementImplied() { agreement_implied = previous_; }

bool AgreementImplied::active() { return agreement_implied; }

}  // namespace dpt::dist
