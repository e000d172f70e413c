#include "dptrain/launch/worker_group.h"

#include <gtest/gtest.h>

#include <string>
#include <vector>

using dpt::launch::GroupResult;
using dpt::launch::WorkerExit;

namespace {

GroupResult killed_with(std::vector<std::string> tail) {
  GroupResult result;
  result.outcome = GroupResult::Outcome::WorkerFailed;
  result.exit_code = 128 + 9;
  WorkerExit exit;
  exit.name = "rank 1";
  exit.signal = 9;
  exit.exit_code = 128 + 9;
  exit.tail = std::move(tail);
  result.first_failure = exit;
  return result;
}

const std::string kGlooInfo =
    "[./gloo/transport/tcp/context.cc:243] INFO Rank 1 is connected to 1. Expected number of connected peers is: 1";

}  // namespace

// The summary's cause is the last error line, else the last line that is not a library's
// informational record (newer Gloo logs every connection), else nothing.
TEST(GroupResult, SummaryPassesOverInformationalLogRecords) {
  const std::string killed = "rank 1 was killed by signal 9 (Killed)";
  EXPECT_EQ(killed_with({}).summary(), killed);
  EXPECT_EQ(killed_with({kGlooInfo}).summary(), killed);
  EXPECT_EQ(killed_with({"[I1129 07:01:02.000000000 ProcessGroupNCCL.cpp:900] init", kGlooInfo}).summary(), killed);
  EXPECT_EQ(killed_with({"epoch 1 step 20 loss 2.31", kGlooInfo}).summary(), killed + ": epoch 1 step 20 loss 2.31");
  EXPECT_EQ(killed_with({"RuntimeError: bad shape", "epoch 1 step 20"}).summary(),
            killed + ": RuntimeError: bad shape");
  // A line that only starts like a record is the cause.
  EXPECT_EQ(killed_with({"I12 images left", kGlooInfo}).summary(), killed + ": I12 images left");
}
