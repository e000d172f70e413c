#include <gtest/gtest.h>

#include <chrono>
#include <vector>

#include "dptrain/train/straggler_watch.h"

using dpt::train::StepPhase;
using dpt::train::StragglerOptions;
using dpt::train::StragglerWatch;

namespace {

// A window's row for one rank: steps, then data, copy, forward, backward compute, optimizer (ms).
std::vector<double> row(double steps, double forward_ms, double backward_ms) {
  return {steps, steps * 2, steps * 1, steps * forward_ms, steps * backward_ms, steps * 5};
}

std::vector<double> table(const std::vector<std::vector<double>>& rows) {
  std::vector<double> out;
  for (const auto& r : rows) out.insert(out.end(), r.begin(), r.end());
  return out;
}

// A rank's phases go into its row: backward without its wait for the others, the waits out.
TEST(StragglerWatch, ARankSendsItsBusyPartsAtTheWindowsEnd) {
  StragglerWatch watch(StragglerOptions().window_steps(4), /*rank=*/1, /*world=*/2, nullptr);
  const auto t0 = StragglerWatch::Clock::time_point();
  auto ms = [&](int n) { return t0 + std::chrono::milliseconds(n); };
  for (int64_t step = 1; step <= 2; ++step) {
    watch.on_phase(StepPhase::Data, t0, ms(3), step);
    watch.on_phase(StepPhase::Forward, t0, ms(10), step);
    watch.on_phase(StepPhase::Backward, t0, ms(30), step);
    watch.on_phase(StepPhase::WaitForCommunication, t0, ms(12), step);
    watch.on_phase(StepPhase::MetricsAllReduce, t0, ms(50), step);
    watch.on_phase(StepPhase::Optimizer, t0, ms(4), step);
  }
  EXPECT_TRUE(watch.rows_to_send(3).empty());
  EXPECT_EQ(watch.rows_to_send(4), (std::vector<double>{0, 0, 0, 0, 0, 0, 2, 6, 0, 20, 36, 8}));
}

// Without a fixed step count a window lasts about --straggler-seconds: the first 10 steps, then
// as many steps as the last window's slowest rank takes in that time, at least 5.
TEST(StragglerWatch, WindowsLastAboutTheirSecondsWhateverAStepCosts) {
  StragglerWatch watch(StragglerOptions().window_seconds(3), 0, 2, nullptr);
  const auto ends = [&](int64_t from, int64_t to) {
    std::vector<int64_t> steps;
    for (int64_t step = from; step <= to; ++step) {
      if (!watch.rows_to_send(step).empty()) steps.push_back(step);
    }
    return steps;
  };
  EXPECT_EQ(ends(1, 25), (std::vector<int64_t>{10, 20}));
  // 100 ms per step on the slower rank (row: 2 + 1 + 40 + 52 + 5 ms): 30 steps to a window.
  EXPECT_FALSE(watch.judge(table({row(10, 40, 40), row(10, 40, 52)}), 20));
  EXPECT_EQ(ends(21, 50), (std::vector<int64_t>{50}));
  EXPECT_FALSE(watch.judge(table({row(30, 400, 400), row(30, 400, 400)}), 50));  // 808 ms: 4 steps, so 5
  EXPECT_EQ(ends(51, 55), (std::vector<int64_t>{55}));
  // A judged window of fast steps (8 ms) makes the next one 375 steps.
  EXPECT_FALSE(watch.judge(table({row(5, 0, 0), row(5, 0, 0)}), 55));
  EXPECT_TRUE(watch.rows_to_send(429).empty());
  EXPECT_FALSE(watch.rows_to_send(430).empty());
}

// Three slow windows in a row name the rank, with the part that is slow; a window at the usual
// pace starts the count again.
TEST(StragglerWatch, ARankSlowForThreeWindowsIsNamedWithItsSlowPart) {
  StragglerWatch watch(StragglerOptions().window_steps(10), 0, 3, nullptr);
  // Rank 2's forward takes twice the others': busy 128 ms per step against 88.
  const auto slow = table({row(10, 40, 40), row(9, 41, 40), row(10, 80, 40)});
  EXPECT_FALSE(watch.judge(slow, 10));
  EXPECT_FALSE(watch.judge(slow, 20));
  const auto named = watch.judge(slow, 30);
  ASSERT_TRUE(named);
  EXPECT_EQ(named->rank, 2);
  EXPECT_EQ(named->global_step, 30);
  EXPECT_EQ(named->windows, 3);
  EXPECT_DOUBLE_EQ(named->busy_ms, 128);
  EXPECT_DOUBLE_EQ(named->others_busy_ms, 88.5);  // median of 88 and 89
  EXPECT_EQ(named->part, "forward");
  EXPECT_DOUBLE_EQ(named->part_ms, 80);
  EXPECT_DOUBLE_EQ(named->others_part_ms, 40.5);
  EXPECT_EQ(named->busy_ms_by_rank, (std::vector<double>{88, 89, 128}));
  EXPECT_FALSE(watch.judge(table({row(10, 40, 40), row(10, 40, 40), row(10, 40, 40)}), 40));
  EXPECT_FALSE(watch.judge(slow, 50));
  EXPECT_FALSE(watch.judge(slow, 60));
  EXPECT_TRUE(watch.judge(slow, 70));
  EXPECT_TRUE(watch.judge({}, 71) == std::nullopt);  // not a window's end
}

// Under the threshold (20% slower against 25%), and with the watch off, nobody is named.
TEST(StragglerWatch, RanksWithinTheThresholdAreNotNamed) {
  StragglerWatch watch(StragglerOptions().window_steps(1).windows(1), 0, 2, nullptr);
  const auto a_bit_slower = table({row(5, 40, 40), row(5, 40, 57.6)});  // 88 against 105.6 ms
  EXPECT_FALSE(watch.judge(a_bit_slower, 1));
  StragglerWatch strict(StragglerOptions().window_steps(1).windows(1).threshold(0.1), 0, 2, nullptr);
  const auto named = strict.judge(a_bit_slower, 1);
  ASSERT_TRUE(named);
  EXPECT_EQ(named->part, "backward (compute)");
  StragglerWatch off(StragglerOptions().threshold(0), 0, 2, nullptr);
  EXPECT_TRUE(off.rows_to_send(50).empty());
}

}  // namespace
