#include <gtest/gtest.h>

#include <csignal>

#include "dptrain/common/error.h"
#include "dptrain/train/stop_signals.h"

namespace {

int seen_by_previous = 0;
void previous_handler(int signal) { seen_by_previous = signal; }

}  // namespace

TEST(StopSignals, RecordsTheFirstSignalAndRestoresThePreviousHandler) {
  std::signal(SIGUSR1, previous_handler);
  seen_by_previous = 0;
  {
    dpt::train::StopSignals stop({SIGTERM, SIGUSR1});
    EXPECT_EQ(stop.received(), 0);
    std::raise(SIGUSR1);
    EXPECT_EQ(stop.received(), SIGUSR1);
    std::raise(SIGTERM);  // caught too, and the first one stays
    EXPECT_EQ(stop.received(), SIGUSR1);
    EXPECT_EQ(seen_by_previous, 0);
  }
  std::raise(SIGUSR1);
  EXPECT_EQ(seen_by_previous, SIGUSR1);
  std::signal(SIGUSR1, SIG_DFL);
  // A new one starts with nothing received.
  dpt::train::StopSignals again({SIGUSR1});
  EXPECT_EQ(again.received(), 0);
}

TEST(StopSignals, OneAtATime) {
  dpt::train::StopSignals stop({SIGUSR1});
  EXPECT_THROW(dpt::train::StopSignals({SIGUSR2}), dpt::ConfigError);
}

TEST(StopSignals, AnUncatchableSignalFailsAndLeavesTheHandlersAsTheyWere) {
  std::signal(SIGUSR1, previous_handler);
  seen_by_previous = 0;
  EXPECT_THROW(dpt::train::StopSignals({SIGUSR1, SIGKILL}), dpt::ConfigError);
  std::raise(SIGUSR1);
  EXPECT_EQ(seen_by_previous, SIGUSR1);
  std::signal(SIGUSR1, SIG_DFL);
  dpt::train::StopSignals after({SIGUSR1});  // and the next one may be made
  EXPECT_EQ(after.received(), 0);
}
