#pragma once
// The message of the `Error` that `action` throws, for tests that compare whole messages:
//
//   EXPECT_EQ(dpt::testing::error_of<dpt::ConfigError>([&] { parse(bad); }), "expected message");
//
// An exception of another type propagates (and fails the test); no exception at all gives
// "(no error)", which no expected message equals.

#include <functional>
#include <string>

namespace dpt::testing {

template <typename Error>
std::string error_of(const std::function<void()>& action) {
  try {
    action();
  } catch (const Error& error) {
    return error.what();
  }
  return "(no error)";
}

}  // namespace dpt::testing
