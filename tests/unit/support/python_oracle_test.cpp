// The oracle Python that the unit tests ask for expected values: each script must see a Python of
// its own, and a script that fails must fail the test with Python's own words.
#include <gtest/gtest.h>

#include <stdexcept>
#include <string>

#include "support/python_oracle.h"

namespace {

using dpt::testing::run_python;

// The error a failing script throws, or "" when it does not throw.
std::string failure_of(const std::string& script) {
  try {
    run_python(script);
  } catch (const std::runtime_error& e) {
    return e.what();
  }
  return "";
}

TEST(PythonOracle, EachScriptStartsFromAFreshInterpreter) {
  auto changed = run_python("torch.set_default_dtype(torch.float64); import json; limit = 3; print('set')");
  if (!changed) DPT_MISSING_DEPENDENCY(dpt::testing::oracle_missing("torch"));
  EXPECT_EQ(*changed, "set\n");
  auto seen = run_python("print(torch.get_default_dtype(), 'json' in globals(), 'limit' in globals())");
  ASSERT_TRUE(seen);
  EXPECT_EQ(*seen, "torch.float32 False False\n");
}

TEST(PythonOracle, AFailingScriptThrowsWithItsTraceback) {
  if (!run_python("pass")) DPT_MISSING_DEPENDENCY(dpt::testing::oracle_missing("torch"));
  const std::string failure = failure_of("print('before')\nraise ValueError('bad input 7')");
  EXPECT_NE(failure.find("before"), std::string::npos) << failure;
  EXPECT_NE(failure.find("ValueError: bad input 7"), std::string::npos) << failure;
  // The server survives a failed script.
  EXPECT_EQ(run_python("print(6 * 7)").value_or(""), "42\n");
}

TEST(PythonOracle, SysExitEndsAScriptAsItEndsPython) {
  if (!run_python("pass")) DPT_MISSING_DEPENDENCY(dpt::testing::oracle_missing("torch"));
  EXPECT_EQ(run_python("print('done'); sys.exit(0)").value_or(""), "done\n");
  EXPECT_EQ(run_python("print('done'); sys.exit()").value_or(""), "done\n");
  EXPECT_NE(failure_of("sys.exit(3)"), "");
  const std::string failure = failure_of("sys.exit('the sampler is wrong')");
  EXPECT_NE(failure.find("the sampler is wrong"), std::string::npos) << failure;
}

}  // namespace
