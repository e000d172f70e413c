#include <gtest/gtest.h>

#include <future>

#include <torch/csrc/distributed/c10d/HashStore.hpp>

#include "dptrain/common/error.h"
#include "dptrain/dist/rendezvous.h"
#include "support/thread_ranks.h"

using namespace std::chrono_literals;
using dpt::dist::join;
using dpt::dist::RendezvousOptions;
using dpt::dist::WorldInfo;
using dpt::testing::local_world;

namespace {

// Joins in a thread; the future holds "" on success, else the error text.
std::future<std::string> join_async(c10d::Store& store, WorldInfo w, std::chrono::milliseconds timeout) {
  return std::async(std::launch::async, [&store, w, timeout]() -> std::string {
    try {
      join(store, w, RendezvousOptions(timeout));
      return "";
    } catch (const dpt::Error& e) {
      return e.what();
    }
  });
}

void expect_contains(const std::string& text, const std::string& needle) {
  EXPECT_NE(text.find(needle), std::string::npos) << "'" << needle << "' not in: " << text;
}

}  // namespace

TEST(Join, AllRanksMeet) {
  c10d::HashStore store;
  std::vector<std::future<std::string>> ranks;
  for (int r = 0; r < 4; ++r) ranks.push_back(join_async(store, local_world(r, 4), 5s));
  for (auto& f : ranks) EXPECT_EQ(f.get(), "");
}

TEST(Join, MissingRankIsNamedWithinTheTimeout) {
  c10d::HashStore store;
  auto start = std::chrono::steady_clock::now();
  auto r0 = join_async(store, local_world(0, 3), 300ms);
  auto r2 = join_async(store, local_world(2, 3), 300ms);
  std::string e0 = r0.get(), e2 = r2.get();
  auto waited = std::chrono::steady_clock::now() - start;
  expect_contains(e0, "rank 0: rendezvous timed out after 0.3 s: 2 of 3 ranks joined; missing rank(s) 1.");
  expect_contains(e2, "missing rank(s) 1.");
  EXPECT_LT(waited, 3s);
}

TEST(Join, DuplicateRankIsRefused) {
  c10d::HashStore store;
  auto first = join_async(store, local_world(0, 2), 2s);
  std::this_thread::sleep_for(50ms);
  std::string second;
  try {
    join(store, local_world(0, 2), RendezvousOptions(2s));
  } catch (const dpt::ConfigError& e) {
    second = e.what();
  }
  expect_contains(second, "another process has already joined this job as rank 0");
  join(store, local_world(1, 2), RendezvousOptions(2s));  // lets the first one finish
  EXPECT_EQ(first.get(), "");
}

TEST(Join, MismatchedWorldSizesFailFastOnBothSides) {
  c10d::HashStore store;
  auto start = std::chrono::steady_clock::now();
  auto r0 = join_async(store, local_world(0, 2), 10s);
  auto r1 = join_async(store, local_world(1, 3), 10s);
  std::string e0 = r0.get(), e1 = r1.get();
  expect_contains(e0, "rank 0: rank 1 was started with world size 3 but this rank with 2");
  expect_contains(e1, "rank 1: rank 0 was started with world size 2 but this rank with 3");
  EXPECT_LT(std::chrono::steady_clock::now() - start, 5s) << "must not wait for the timeout";
}

TEST(Join, RankOutsideTheWorld) {
  c10d::HashStore store;
  EXPECT_THROW(join(store, local_world(2, 2), RendezvousOptions(1s)), dpt::ConfigError);
}
