#pragma once
// Polls `ready` every 5 ms until it holds or `limit` has passed; returns whether it held. For a
// test thread that waits on another: a bare wait would hang the whole suite if the other thread
// failed before signalling, where this ends and lets the test report what went wrong.
//
//   EXPECT_TRUE(dpt::testing::wait_until([&] { return done.load(); }, std::chrono::seconds(30)));

#include <chrono>
#include <functional>
#include <thread>

namespace dpt::testing {

inline bool wait_until(const std::function<bool()>& ready, std::chrono::milliseconds limit) {
  const auto deadline = std::chrono::steady_clock::now() + limit;
  while (!ready()) {
    if (std::chrono::steady_clock::now() >= deadline) return false;
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  }
  return true;
}

}  // namespace dpt::testing
