#include "dptrain/train/stop_signals.h"

#include <atomic>
#include <csignal>
#include <cerrno>
#include <cstring>
#include <string>

#include "dptrain/common/error.h"

namespace dpt::train {

namespace {

// A handler may only touch lock-free atomics; there is one StopSignals at a time.
std::atomic<int> first_signal{0};
std::atomic<bool> installed{false};
static_assert(std::atomic<int>::is_always_lock_free);

void record(int signal) {
  int none = 0;
  first_signal.compare_exchange_strong(none, signal);
}

}  // namespace

struct StopSignals::Previous {
  int signal;
  struct sigaction action;
};

StopSignals::StopSignals(std::vector<int> signals) {
  DPT_CHECK(!installed.exchange(true), ConfigError, "only one StopSignals may be alive at a time");
  first_signal = 0;
  for (int signal : signals) {
    struct sigaction action;
    std::memset(&action, 0, sizeof(action));
    action.sa_handler = record;
    sigemptyset(&action.sa_mask);
    action.sa_flags = SA_RESTART;  // a read or a wait in progress carries on
    Previous previous{signal, {}};
    if (sigaction(signal, &action, &previous.action) != 0) {
      const std::string reason = std::strerror(errno);
      restore();
      throw ConfigError(str("cannot catch signal ", signal, ": ", reason));
    }
    previous_.push_back(previous);
  }
}

StopSignals::~StopSignals() { restore(); }

void StopSignals::restore() {
  for (const auto& previous : previous_) sigaction(previous.signal, &previous.action, nullptr);
  previous_.clear();
  installed = false;
}

int StopSignals::received() const { return first_signal.load(); }

}  // namespace dpt::train
