#include "dptrain/common/bounded_command.h"

#include <gtest/gtest.h>
#include <sys/wait.h>

#include <cerrno>
#include <string>

using dpt::CommandOutcome;
using dpt::run_bounded;
using namespace std::chrono_literals;

TEST(BoundedCommand, CapturesTheOutputOfAProgramThatSucceeds) {
  const CommandOutcome ran = run_bounded({"sh", "-c", "printf 'one\\ntwo words'; printf x >&2"}, 10s, true);
  EXPECT_TRUE(ran.succeeded());
  EXPECT_EQ(ran.output, "one\ntwo words");  // standard error is not taken
  EXPECT_EQ(ran.describe("sh"), "");
}

TEST(BoundedCommand, SaysHowAProgramFailed) {
  CommandOutcome ran = run_bounded({"sh", "-c", "exit 3"}, 10s);
  EXPECT_FALSE(ran.succeeded());
  EXPECT_EQ(ran.describe("the tool"), "the tool exited with status 3");
  ran = run_bounded({"sh", "-c", "kill -TERM $$"}, 10s);
  EXPECT_EQ(ran.describe("the tool"), "the tool was killed by signal 15");
  ran = run_bounded({"dptrain-no-such-program"}, 10s, true);
  EXPECT_EQ(ran.spawn_error, ENOENT);
  EXPECT_EQ(ran.describe("it"), "could not run it (No such file or directory)");
}

// A program that outlives its bound is killed there, also one that keeps its output open.
TEST(BoundedCommand, KillsAProgramAtTheBound) {
  for (bool capture : {false, true}) {
    const CommandOutcome ran = run_bounded({"sleep", "30"}, 300ms, capture);
    EXPECT_TRUE(ran.timed_out);
    EXPECT_FALSE(ran.succeeded());
    EXPECT_TRUE(WIFSIGNALED(ran.status) && WTERMSIG(ran.status) == SIGKILL);
    EXPECT_EQ(ran.describe("sleep"), "sleep did not finish within 0.3 s");
  }
}
