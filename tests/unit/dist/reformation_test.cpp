// Which ranks go on after a loss (dist/reformation.h): ranks as threads over an in-memory store.
#include "dptrain/dist/reformation.h"

#include <future>
#include <string>
#include <vector>

#include <gtest/gtest.h>
#include <torch/csrc/distributed/c10d/HashStore.hpp>

#include "dptrain/common/error.h"

using dpt::dist::agree_on_survivors;
using dpt::dist::ReformationOptions;
using dpt::dist::Survivors;
using std::chrono::milliseconds;

namespace {

std::future<Survivors> arrive(c10d::Store& store, ReformationOptions options) {
  return std::async(std::launch::async, [&store, options] { return agree_on_survivors(store, options); });
}

}  // namespace

TEST(Reformation, TheRanksLeftAgreeOnThemselvesAndTheirProgress) {
  c10d::HashStore store;
  // Rank 1 of 4 is lost; only rank 2 (its watcher) knows. Rank 0 got a step further.
  auto r0 = arrive(store, ReformationOptions(1, 0, 4).progress(8).window(std::chrono::seconds(60)));
  auto r2 = arrive(store, ReformationOptions(1, 2, 4).progress(7).lost({1}).window(std::chrono::seconds(60)));
  auto r3 = arrive(store, ReformationOptions(1, 3, 4).progress(7).window(std::chrono::seconds(60)));
  for (auto* rank : {&r0, &r2, &r3}) {
    const Survivors left = rank->get();
    EXPECT_EQ(left.ranks, (std::vector<int>{0, 2, 3}));
    EXPECT_EQ(left.progress, (std::vector<int64_t>{8, 7, 7}));
    EXPECT_EQ(left.size(), 3);
  }
  EXPECT_EQ(arrive(store, ReformationOptions(2, 0, 1)).get().rank, 0);  // a new generation starts afresh
}

TEST(Reformation, AfterTheWindowTheListClosesWithoutTheRanksNotHeardFrom) {
  c10d::HashStore store;
  auto r1 = arrive(store, ReformationOptions(3, 1, 3).window(milliseconds(300)));
  auto r2 = arrive(store, ReformationOptions(3, 2, 3).window(milliseconds(300)));
  EXPECT_EQ(r1.get().ranks, (std::vector<int>{1, 2}));
  const Survivors second = r2.get();
  EXPECT_EQ(second.ranks, (std::vector<int>{1, 2}));
  EXPECT_EQ(second.rank, 1);
  // Rank 0 arrives after the others closed the list: it is told to leave, not let in.
  try {
    agree_on_survivors(store, ReformationOptions(3, 0, 3).window(milliseconds(300)));
    FAIL() << "a rank that arrived after the list closed was let in";
  } catch (const dpt::DistError& e) {
    EXPECT_NE(std::string(e.what()).find("rank 0: the ranks that remain (1 2) formed their group without this rank"),
              std::string::npos)
        << e.what();
  }
}

TEST(Reformation, ARankKnownGoneIsNotWaitedFor) {
  // Rank 1's launcher saw it fail (failed_worker_key); nobody named it. Without `gone` the list
  // would stay open for the hour: the suite's timeout fails the test then.
  c10d::HashStore store;
  const auto gone = [](int rank) { return rank == 1; };
  auto r0 = arrive(store, ReformationOptions(1, 0, 3).gone(gone).window(std::chrono::hours(1)));
  auto r2 = arrive(store, ReformationOptions(1, 2, 3).gone(gone).window(std::chrono::hours(1)));
  EXPECT_EQ(r0.get().ranks, (std::vector<int>{0, 2}));
  EXPECT_EQ(r2.get().rank, 1);
}
