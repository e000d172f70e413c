#include "dptrain/dist/abandonment.h"

#include <algorithm>

namespace dpt::dist {

void Abandonment::abandon(const std::string& why) {
  std::lock_guard<std::mutex> lock(mutex_);
  if (abandoned_) return;
  why_ = why;
  abandoned_ = true;
}

void Abandonment::throw_if_abandoned() const {
  if (!abandoned_) return;
  std::lock_guard<std::mutex> lock(mutex_);
  throw GroupAbandoned(why_);
}

void Abandonment::wait(const compat::WorkPtr& work, std::chrono::milliseconds timeout) const {
  if (!armed_) {
    work->wait(timeout);
    return;
  }
  using Clock = std::chrono::steady_clock;
  const auto deadline = Clock::now() + timeout;
  while (true) {
    throw_if_abandoned();
    const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(deadline - Clock::now());
    // Never 0 ms, which c10d reads as "no timeout".
    const auto slice = std::max(std::chrono::milliseconds(1), std::min(left, kSlice));
    try {
      work->wait(slice);
      return;
    } catch (...) {
      if (Clock::now() >= deadline) throw;
      // Still running: it only outlasted the slice. Completed: either it failed for real, or it
      // completed between the slice's end and this look, and the slice's own timeout is no failure;
      // a second wait on a completed work gives its outcome (returns, or throws its error).
      if (work->isCompleted()) {
        work->wait(slice);
        return;
      }
    }
  }
}

}  // namespace dpt::dist
