#include <gtest/gtest.h>

#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <future>
#include <sstream>
#include <string>

#include <torch/torch.h>

#include "dptrain/common/error.h"
#include "dptrain/train/checkpoint/checkpoint_file.h"
#include "support/temp_dir.h"
#include "train/run_checkpoints.h"

namespace fs = std::filesystem;
using namespace dpt::train;

namespace {

c10::IValue state_of(int64_t step) {
  c10::impl::GenericDict state(c10::StringType::get(), c10::AnyType::get());
  state.insert("weight", torch::full({4}, static_cast<double>(step)));
  state.insert("step", step);
  return state;
}

CheckpointOptions into(const std::string& dir) { return CheckpointOptions().output_dir(dir); }

// Writes in the caller's thread: each save() has landed when it returns.
CheckpointWriterOptions in_this_thread() { return CheckpointWriterOptions().background(false); }

TEST(RunCheckpoints, PeriodicOnesAreDueAsTheirOptionsSay) {
  RunCheckpoints none(into("run"), {}, nullptr, nullptr);
  EXPECT_TRUE(none.enabled());
  EXPECT_FALSE(none.steps_due(10));
  EXPECT_FALSE(none.time_due());
  EXPECT_FALSE(none.wants_preparing()) << "no periodic checkpoints: nothing to prepare for";

  RunCheckpoints every_ten(into("run").every_steps(10), {}, nullptr, nullptr);
  EXPECT_TRUE(every_ten.steps_due(10));
  EXPECT_FALSE(every_ten.steps_due(15));
  EXPECT_TRUE(every_ten.steps_due(20));
  EXPECT_FALSE(every_ten.time_due());
  EXPECT_TRUE(every_ten.wants_preparing());

  EXPECT_TRUE(RunCheckpoints(into("run").every_minutes(0.0), {}, nullptr, nullptr).time_due());
  EXPECT_FALSE(RunCheckpoints(into("run").every_minutes(60.0), {}, nullptr, nullptr).time_due());

  RunCheckpoints nowhere(into("").every_steps(10), {}, nullptr, nullptr);
  EXPECT_FALSE(nowhere.enabled());
  EXPECT_FALSE(nowhere.wants_preparing());
}

TEST(RunCheckpoints, PreparesOnce) {
  dpt::testing::TempDir dir;
  RunCheckpoints checkpoints(into(dir.path()).every_steps(5), {}, nullptr, nullptr);
  ASSERT_TRUE(checkpoints.wants_preparing());
  checkpoints.prepare(state_of(0));
  EXPECT_FALSE(checkpoints.wants_preparing());
}

// Each write that lands is one log line: what it cost, or why it failed and that the older files
// stay. A failed last write fails the run's end; a good one after it clears that.
TEST(RunCheckpoints, LogsEachWriteAndRefusesToEndOnAFailedOne) {
  dpt::testing::TempDir dir;
  // A leftover of a killed write (a process id no process has): removed when the writer is made.
  const fs::path leftover = fs::path(dir.path()) / "checkpoint.pt.tmp.999999999";
  std::ofstream(leftover) << "half";
  std::ostringstream log;
  RunCheckpoints checkpoints(into(dir.path()), in_this_thread(), &log, nullptr);
  EXPECT_NO_THROW(checkpoints.check_last_written()) << "nothing written yet, nothing failed";

  checkpoints.save(state_of(10), 10, /*epoch_done=*/1, BestModel::Replace, RunCheckpoints::Cause::Epoch);
  checkpoints.report();
  EXPECT_FALSE(fs::exists(leftover));
  const std::string latest = (fs::path(dir.path()) / "checkpoint.pt").string();
  EXPECT_TRUE(fs::exists(fs::path(dir.path()) / "checkpoint_epoch1.pt"));
  EXPECT_TRUE(fs::exists(fs::path(dir.path()) / "model_best.pt"));
  EXPECT_NE(log.str().find("checkpoint: removed " + leftover.string() + ", a write its killed process left "
                           "unfinished\ncheckpoint: wrote " + latest + " ("),
            std::string::npos)
      << log.str();
  EXPECT_NO_THROW(checkpoints.check_last_written());

  // The next write's temporary file cannot be made: a folder is in its way.
  const fs::path blocker = latest + ".tmp." + std::to_string(::getpid());
  fs::create_directory(blocker);
  log.str("");
  checkpoints.save(state_of(20), 20, std::nullopt, BestModel::IfNone, RunCheckpoints::Cause::Stop);
  checkpoints.finish();
  EXPECT_NE(log.str().find("checkpoint: the checkpoint of step 20 was not written: cannot create " +
                           blocker.string()),
            std::string::npos)
      << log.str();
  EXPECT_NE(log.str().find("The files it would have replaced are kept; training goes on"), std::string::npos);
  try {
    checkpoints.check_last_written();
    ADD_FAILURE() << "a failed last write must fail the run's end";
  } catch (const dpt::CheckpointError& e) {
    const std::string text = e.what();
    EXPECT_NE(text.find("the last checkpoint (step 20) was not written"), std::string::npos) << text;
    EXPECT_NE(text.find("; any checkpoint in " + dir.path() + " is an older one"), std::string::npos) << text;
  }

  fs::remove(blocker);
  checkpoints.save(state_of(30), 30, std::nullopt, BestModel::IfNone, RunCheckpoints::Cause::Periodic);
  checkpoints.report();
  EXPECT_NO_THROW(checkpoints.check_last_written());
}

// A periodic checkpoint that finds the last write still in flight is skipped and says so; one the
// run needs (an epoch's, a stop's) waits for it.
TEST(RunCheckpoints, APeriodicOneFindingAWriteInFlightIsSkipped) {
  dpt::testing::TempDir dir;
  std::promise<void> release;
  std::shared_future<void> released = release.get_future().share();
  std::ostringstream log;
  RunCheckpoints checkpoints(into(dir.path()).every_steps(10),
                             CheckpointWriterOptions().before_write([released] { released.wait(); }), &log, nullptr);
  checkpoints.save(state_of(10), 10, std::nullopt, BestModel::IfNone, RunCheckpoints::Cause::Periodic);
  checkpoints.save(state_of(20), 20, std::nullopt, BestModel::IfNone, RunCheckpoints::Cause::Periodic);
  const std::string skipped = log.str();
  release.set_value();
  EXPECT_EQ(skipped,
            "checkpoint: none after step 20: the write of step 10 is still in flight (writes take longer than "
            "--checkpoint-every/--checkpoint-minutes leave them)\n");
  checkpoints.save(state_of(30), 30, /*epoch_done=*/3, BestModel::IfNone, RunCheckpoints::Cause::Epoch);
  checkpoints.finish();
  EXPECT_EQ(log.str().find("none after step 30"), std::string::npos) << log.str();
  EXPECT_TRUE(fs::exists(fs::path(dir.path()) / "checkpoint_epoch3.pt"));
  EXPECT_EQ(load_checkpoint(fs::path(dir.path()) / "checkpoint.pt").toGenericDict().at("step").toInt(), 30);
}

}  // namespace
