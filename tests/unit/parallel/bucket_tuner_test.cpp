#include <gtest/gtest.h>

#include "dptrain/common/error.h"
#include "dptrain/parallel/bucket_tuner.h"

namespace {

constexpr int64_t kMiB = int64_t{1} << 20;

// Drives a tuner through its sweep, timing each step with seconds_under(cap); returns the caps
// it asked for, in order.
std::vector<double> sweep(dpt::BucketTuner& tuner, const std::function<double(double)>& seconds_under) {
  std::vector<double> asked;
  while (!tuner.done()) {
    if (auto next = tuner.record(seconds_under(tuner.current_mb()))) asked.push_back(*next);
  }
  return asked;
}

}  // namespace

// One warm-up step and two measured ones per candidate; the fastest mean wins, and the tuner asks
// for it once more at the end (its buckets are not in place: the last candidate's are).
TEST(BucketTuner, TriesEveryCandidateAndKeepsTheFastest) {
  dpt::BucketTuner tuner(100 * kMiB);
  EXPECT_EQ(tuner.current_mb(), 1);
  EXPECT_EQ(tuner.steps(), 15);
  int steps = 0;
  const auto asked = sweep(tuner, [&steps](double mb) {
    ++steps;
    // The warm-up step is slow (page faults): a tuner that measured it would pick 50.
    const bool warm_up = (steps - 1) % 3 == 0;
    return warm_up ? 9.0 : (mb == 10 ? 0.5 : 1.0);
  });
  EXPECT_EQ(steps, 15);
  EXPECT_EQ(asked, (std::vector<double>{4, 10, 25, 50, 10}));
  EXPECT_EQ(tuner.current_mb(), 10);
  EXPECT_EQ(tuner.describe(), "10 MiB (1: 1000 ms, 4: 1000 ms, 10: 500 ms, 25: 1000 ms, 50: 1000 ms)");
  EXPECT_FALSE(tuner.record(0.1).has_value());  // done: nothing changes any more
}

// The measured steps are averaged: one slow step does not decide alone.
TEST(BucketTuner, AveragesTheMeasuredSteps) {
  dpt::BucketTuner tuner(100 * kMiB, dpt::BucketTunerOptions().candidates_mb({1, 4}).warmup_steps(0).measured_steps(2));
  for (double seconds : {0.1, 0.9, 0.4, 0.4}) tuner.record(seconds);  // means 0.5 and 0.4
  EXPECT_TRUE(tuner.done());
  EXPECT_EQ(tuner.current_mb(), 4);
  EXPECT_EQ(tuner.describe(), "4 MiB (1: 500 ms, 4: 400 ms)");
}

// Caps past the whole gradient make one bucket alike: only the first of them is tried, and with
// a single candidate left there is nothing to measure.
TEST(BucketTuner, LeavesOutCapsPastTheWholeGradient) {
  dpt::BucketTuner tuner(6 * kMiB);
  EXPECT_EQ(tuner.steps(), 9);  // 1, 4 and 10
  EXPECT_EQ(sweep(tuner, [](double mb) { return mb; }), (std::vector<double>{4, 10, 1}));
  dpt::BucketTuner small(kMiB / 2);
  EXPECT_TRUE(small.done());
  EXPECT_EQ(small.current_mb(), 1);
}

TEST(BucketTuner, RefusesOptionsThatCannotTune) {
  EXPECT_THROW(dpt::BucketTuner(kMiB, dpt::BucketTunerOptions().candidates_mb({})), dpt::ConfigError);
  EXPECT_THROW(dpt::BucketTuner(kMiB, dpt::BucketTunerOptions().measured_steps(0)), dpt::ConfigError);
  EXPECT_THROW(dpt::BucketTuner(kMiB, dpt::BucketTunerOptions().candidates_mb({0, 4})), dpt::ConfigError);
}
