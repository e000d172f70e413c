// Ending a rank's waits from another thread (dist/abandonment.h), over c10d works that a test
// completes, fails or leaves running.
#include "dptrain/dist/abandonment.h"

#include <chrono>
#include <stdexcept>
#include <string>
#include <thread>

#include <gtest/gtest.h>

using dpt::dist::Abandonment;
using dpt::dist::GroupAbandoned;
using std::chrono::milliseconds;

namespace {

// A work the test ends: c10d keeps finish() for the backends.
class HeldWork : public c10d::Work {
 public:
  void complete(std::exception_ptr failure = nullptr) { finish(std::move(failure)); }
};

std::thread after(milliseconds delay, std::function<void()> act) {
  return std::thread([delay, act = std::move(act)] {
    std::this_thread::sleep_for(delay);
    act();
  });
}

}  // namespace

TEST(Abandonment, AnArmedWaitLeavesWhenAbandoned) {
  Abandonment abandonment;
  abandonment.arm();
  auto work = c10::make_intrusive<HeldWork>();
  std::thread leaving = after(milliseconds(200), [&] { abandonment.abandon("rank 2 is lost"); });
  try {
    abandonment.wait(work, std::chrono::minutes(10));
    FAIL() << "the wait outlived its abandonment";
  } catch (const GroupAbandoned& e) {
    EXPECT_STREQ(e.what(), "rank 2 is lost");
  }
  leaving.join();
  abandonment.abandon("a second reason is dropped");
  EXPECT_THROW(abandonment.throw_if_abandoned(), GroupAbandoned);
  try {
    abandonment.throw_if_abandoned();
  } catch (const GroupAbandoned& e) {
    EXPECT_STREQ(e.what(), "rank 2 is lost");
  }
}

// A work whose first wait outlasts its slice and that completes as that wait times out: the race
// between a slice's end and the look at the work, which once failed a healthy step.
class CompletingAsTheSliceEnds : public HeldWork {
 public:
  explicit CompletingAsTheSliceEnds(std::exception_ptr outcome = nullptr) : outcome_(std::move(outcome)) {}
  bool wait(std::chrono::milliseconds timeout) override {
    if (!isCompleted()) {
      complete(outcome_);
      throw std::runtime_error("Operation timed out!");
    }
    return HeldWork::wait(timeout);
  }

 private:
  std::exception_ptr outcome_;
};

TEST(Abandonment, AWorkThatCompletesAsItsSliceEndsGivesItsOwnOutcome) {
  Abandonment abandonment;
  abandonment.arm();
  // Completed well: the slice's timeout is no failure.
  EXPECT_NO_THROW(abandonment.wait(c10::make_intrusive<CompletingAsTheSliceEnds>(), std::chrono::minutes(10)));
  // Completed with an error: that error, not the slice's timeout.
  auto failing = c10::make_intrusive<CompletingAsTheSliceEnds>(
      std::make_exception_ptr(std::runtime_error("Connection closed by peer")));
  try {
    abandonment.wait(failing, std::chrono::minutes(10));
    FAIL() << "a failed work's wait returned";
  } catch (const std::exception& e) {
    EXPECT_NE(std::string(e.what()).find("Connection closed by peer"), std::string::npos) << e.what();
  }
}

TEST(Abandonment, UnarmedTheBackendsOwnWaitRunsToItsTimeout) {
  // The negative control of the test above: the same abandonment, unarmed, ends nothing.
  Abandonment abandonment;
  abandonment.abandon("rank 2 is lost");
  auto work = c10::make_intrusive<HeldWork>();
  try {
    abandonment.wait(work, milliseconds(300));
    FAIL() << "a work that never completes completed";
  } catch (const GroupAbandoned&) {
    FAIL() << "an unarmed wait was abandoned";
  } catch (const std::exception&) {
    // c10d's timeout
  }
}

TEST(Abandonment, AnArmedWaitReturnsWhatTheWorkDoes) {
  Abandonment abandonment;
  abandonment.arm();
  // Completed across several slices: returns.
  auto done = c10::make_intrusive<HeldWork>();
  std::thread completing = after(milliseconds(350), [&] { done->complete(); });
  abandonment.wait(done, std::chrono::minutes(10));
  completing.join();
  EXPECT_TRUE(done->isCompleted());
  // Failed: its own error, not a slice's timeout.
  auto failed = c10::make_intrusive<HeldWork>();
  std::thread failing =
      after(milliseconds(150), [&] { failed->complete(std::make_exception_ptr(std::runtime_error("peer reset"))); });
  try {
    abandonment.wait(failed, std::chrono::minutes(10));
    FAIL() << "a failed work returned";
  } catch (const std::exception& e) {
    EXPECT_NE(std::string(e.what()).find("peer reset"), std::string::npos) << e.what();
  }
  failing.join();
  // Never completing: the whole timeout's error, once the slices add up to it.
  auto running = c10::make_intrusive<HeldWork>();
  EXPECT_ANY_THROW(abandonment.wait(running, milliseconds(250)));
  EXPECT_FALSE(running->isCompleted());
}
