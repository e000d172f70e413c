#include "dptrain/common/environment.h"

#include <gtest/gtest.h>

#include <cstdlib>
#include <string>

using namespace std::string_literals;

// As /proc/PID/environ holds them: the first of a repeated name counts (getenv's), set-but-empty
// is set, an entry without '=' is no variable, and the last NUL may be missing.
TEST(Environment, ReadsNulSeparatedEntries) {
  const auto env = dpt::Environment::from_entries("A=1\0EMPTY=\0NOEQUALS\0A=2\0B=x=y"s);
  EXPECT_EQ(env.get("A"), "1");
  EXPECT_EQ(env.get("EMPTY"), "");
  EXPECT_FALSE(env.has("NOEQUALS"));
  EXPECT_EQ(env.get("B"), "x=y");
  EXPECT_EQ(env.vars().size(), 3u);
  EXPECT_TRUE(dpt::Environment::from_entries("").vars().empty());
}

// A variable set after the start is in the current environment and not in the starting one.
TEST(Environment, AtStartIsWhatTheProcessStartedWith) {
  ASSERT_EQ(::setenv("DPTRAIN_SET_AFTER_START", "1", 1), 0);
  EXPECT_TRUE(dpt::Environment::current().has("DPTRAIN_SET_AFTER_START"));
  EXPECT_FALSE(dpt::Environment::at_start().has("DPTRAIN_SET_AFTER_START"));
  ::unsetenv("DPTRAIN_SET_AFTER_START");
  // PATH is given to every test run (ctest and shells alike).
  EXPECT_EQ(dpt::Environment::at_start().get("PATH"), dpt::Environment::current().get("PATH"));
}
