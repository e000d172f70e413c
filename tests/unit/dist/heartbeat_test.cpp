// The heartbeat (dptrain/dist/heartbeat.h) over an in-memory store, each rank's Heartbeat in this
// process: a silent peer is suspected, then lost, after the bound; peers that beat, or that end in
// order, never are; a store that stops answering is named as such.
#include "dptrain/dist/heartbeat.h"

#include <atomic>
#include <condition_variable>
#include <mutex>
#include <optional>
#include <regex>
#include <thread>
#include <vector>

#include <gtest/gtest.h>
#include <torch/csrc/distributed/c10d/HashStore.hpp>

#include "support/wait_until.h"

using dpt::dist::Heartbeat;
using dpt::dist::HeartbeatLoss;
using dpt::dist::HeartbeatOptions;
using std::chrono::milliseconds;

namespace {

// What a rank's heartbeat told and whether it gave up, shared with its thread.
struct Told {
  std::mutex mutex;
  std::vector<std::string> lines;
  std::string loss;
  std::optional<int> lost_rank;
  std::atomic<bool> lost{false};

  std::vector<std::string> all() {
    std::lock_guard<std::mutex> lock(mutex);
    return lines;
  }
};

// A bound of 3 step times of 0.1 s + 0.6 s (0.9 s), confirmed over its last 0.3 s.
HeartbeatOptions quick(Told& told) {
  return HeartbeatOptions()
      .first_step_time(milliseconds(100))
      .slack(milliseconds(600))
      .confirm(milliseconds(300))
      .report([&told](const std::string& line) {
        std::lock_guard<std::mutex> lock(told.mutex);
        told.lines.push_back(line);
      })
      .on_lost([&told](const HeartbeatLoss& loss) {
        {
          std::lock_guard<std::mutex> lock(told.mutex);
          told.loss = loss.message;
          told.lost_rank = loss.rank;
        }
        told.lost = true;
      });
}

// A store whose operations block while it is frozen, as a TCPStore's do when the process serving
// it is stopped.
class FreezableStore : public c10d::Store {
 public:
  void freeze(bool frozen) {
    std::lock_guard<std::mutex> lock(mutex_);
    frozen_ = frozen;
    thawed_.notify_all();
  }
  void set(const std::string& key, const std::vector<uint8_t>& value) override {
    pass();
    inner_.set(key, value);
  }
  std::vector<uint8_t> get(const std::string& key) override {
    pass();
    return inner_.get(key);
  }
  int64_t add(const std::string& key, int64_t value) override {
    pass();
    return inner_.add(key, value);
  }
  bool deleteKey(const std::string& key) override {
    pass();
    return inner_.deleteKey(key);
  }
  bool check(const std::vector<std::string>& keys) override {
    pass();
    return inner_.check(keys);
  }
  int64_t getNumKeys() override {
    pass();
    return inner_.getNumKeys();
  }
  void wait(const std::vector<std::string>& keys) override {
    pass();
    inner_.wait(keys);
  }
  void wait(const std::vector<std::string>& keys, const std::chrono::milliseconds& timeout) override {
    pass();
    inner_.wait(keys, timeout);
  }

 private:
  void pass() {
    std::unique_lock<std::mutex> lock(mutex_);
    thawed_.wait(lock, [this] { return !frozen_; });
  }
  c10d::HashStore inner_;
  std::mutex mutex_;
  std::condition_variable thawed_;
  bool frozen_ = false;
};

// The seconds of silence a loss names ("... for 1.23 s (the bound: ..."), as printed: to the
// hundredth, so up to 0.005 s below the silence itself.
double silence_named(const std::string& loss) {
  std::smatch found;
  EXPECT_TRUE(std::regex_search(loss, found, std::regex(R"(for ([0-9.]+) s \(the bound)"))) << loss;
  return found.empty() ? 0 : std::stod(found[1]);
}

}  // namespace

TEST(Heartbeat, SuspectsASilentPeerThenLosesItAfterTheBound) {
  auto store = c10::make_intrusive<c10d::HashStore>();
  Told told;
  Heartbeat rank0(store, 0, 2, quick(told));  // rank 1 never beats
  EXPECT_EQ(rank0.silence(), milliseconds(900));
  ASSERT_TRUE(dpt::testing::wait_until([&] { return told.lost.load(); }, std::chrono::seconds(30)));
  const auto lines = told.all();
  ASSERT_EQ(lines.size(), 2u) << ::testing::PrintToString(lines);
  EXPECT_TRUE(std::regex_search(lines[0], std::regex(R"(^rank 0: heartbeat: rank 1 has been silent for [0-9.]+ s; )"
                                                     R"(suspected, confirming for 0\.3 s$)")))
      << lines[0];
  EXPECT_EQ(lines[1], told.loss);
  EXPECT_TRUE(std::regex_search(told.loss, std::regex(R"(^rank 0: rank 1 sent no heartbeat for [0-9.]+ s \(the bound: 3 )"
                                                      R"(step times of 0\.10 s \+ 0\.6 s, before the first step was )"
                                                      R"(timed\) while the rendezvous store kept answering: it is )"
                                                      R"(stopped \(SIGSTOP)")))
      << told.loss;
  // Named within the bound, never before five eighths of it (heartbeat.h).
  EXPECT_GE(silence_named(told.loss) + 0.005, 0.5625);
}

TEST(Heartbeat, PeersThatBeatOrEndInOrderAreNeverLost) {
  auto store = c10::make_intrusive<c10d::HashStore>();
  Told told0;
  Told told1;
  Heartbeat rank0(store, 0, 2, quick(told0));
  {
    Heartbeat rank1(store, 1, 2, quick(told1));
    // Three bounds' time, in which the test above loses a silent rank.
    std::this_thread::sleep_for(milliseconds(2700));
    EXPECT_FALSE(told0.lost || told1.lost) << told0.loss << told1.loss;
    EXPECT_TRUE(told0.all().empty() && told1.all().empty());
  }  // rank 1 ends in order
  std::this_thread::sleep_for(milliseconds(1800));
  EXPECT_FALSE(told0.lost) << told0.loss;
  EXPECT_TRUE(told0.all().empty()) << ::testing::PrintToString(told0.all());
}

TEST(Heartbeat, TheBoundFollowsTheLongestRecentStep) {
  auto store = c10::make_intrusive<c10d::HashStore>();
  Told told;
  Heartbeat rank1(store, 1, 3, quick(told).report([](const std::string&) {}));
  rank1.step_took(std::chrono::duration<double>(0.5));
  rank1.step_took(std::chrono::duration<double>(0.2));
  EXPECT_EQ(rank1.silence(), milliseconds(3 * 500 + 600));
  for (int i = 0; i < 10; ++i) rank1.step_took(std::chrono::duration<double>(0.3));  // 0.5 s leaves the window
  EXPECT_EQ(rank1.silence(), milliseconds(3 * 300 + 600));
  Heartbeat fixed(store, 2, 3, quick(told).silence(milliseconds(5000)).report([](const std::string&) {}));
  fixed.step_took(std::chrono::duration<double>(9));
  EXPECT_EQ(fixed.silence(), milliseconds(5000));
}

TEST(Heartbeat, AStoreThatStopsAnsweringIsNamed) {
  auto store = c10::make_intrusive<FreezableStore>();
  Told told0;
  Told told1;
  Heartbeat rank0(store, 0, 2, quick(told0));
  Heartbeat rank1(store, 1, 2, quick(told1));
  std::this_thread::sleep_for(milliseconds(300));
  store->freeze(true);
  const bool lost = dpt::testing::wait_until([&] { return told0.lost && told1.lost; }, std::chrono::seconds(30));
  store->freeze(false);  // for the beat threads to end
  ASSERT_TRUE(lost);
  for (Told* told : {&told0, &told1}) {
    EXPECT_TRUE(std::regex_search(told->loss, std::regex(R"(^rank [01]: the rendezvous store has not answered this )"
                                                         R"(rank's heartbeat for [0-9.]+ s \(the bound: .*\)\. Rank 0 )"
                                                         R"(serves it for env:// and tcp://, so rank 0 is probably )"
                                                         R"(stopped or gone)")))
        << told->loss;
    EXPECT_GE(silence_named(told->loss) + 0.005, 0.5625);
  }
}

TEST(Heartbeat, ALossToldToEveryRankReachesTheRanksThatDidNotWatchTheLostOne) {
  // Rank 1 watches rank 2, which never beats; rank 0 watches rank 1, which does.
  for (const bool tell : {true, false}) {
    auto store = c10::make_intrusive<c10d::HashStore>();
    Told told0;
    Told told1;
    Heartbeat rank0(store, 0, 3, quick(told0).tell_every_rank(tell));
    Heartbeat rank1(store, 1, 3, quick(told1).tell_every_rank(tell));
    ASSERT_TRUE(dpt::testing::wait_until([&] { return told1.lost.load(); }, std::chrono::seconds(30)));
    EXPECT_EQ(told1.lost_rank, 2);
    if (!tell) {
      // The negative control: only the watcher knows, a bound after the loss too.
      std::this_thread::sleep_for(milliseconds(900));
      EXPECT_FALSE(told0.lost) << told0.loss;
      continue;
    }
    ASSERT_TRUE(dpt::testing::wait_until([&] { return told0.lost.load(); }, std::chrono::seconds(30)));
    EXPECT_EQ(told0.lost_rank, 2);
    EXPECT_EQ(told0.loss, told1.loss);
    const auto lines = told0.all();
    ASSERT_FALSE(lines.empty());
    EXPECT_EQ(lines.back(), "rank 0: heartbeat: told through the store: " + told1.loss);
  }
}

TEST(Heartbeat, ALossARanksOwnCodeRaisesReachesEveryRank) {
  auto store = c10::make_intrusive<c10d::HashStore>();
  Told told0;
  Told told1;
  Heartbeat rank0(store, 0, 2, quick(told0).tell_every_rank(true));
  Heartbeat rank1(store, 1, 2, quick(told1).tell_every_rank(true));
  rank0.raise("rank 0: a collective failed: Connection reset by peer");
  ASSERT_TRUE(dpt::testing::wait_until([&] { return told0.lost && told1.lost; }, std::chrono::seconds(30)));
  for (Told* told : {&told0, &told1}) {
    EXPECT_EQ(told->loss, "rank 0: a collective failed: Connection reset by peer");
    EXPECT_FALSE(told->lost_rank.has_value());
  }
}

TEST(Heartbeat, ALossRaisedAsTheHeartbeatEndsStillGoesOut) {
  auto store = c10::make_intrusive<c10d::HashStore>();
  Told told1;
  Heartbeat rank1(store, 1, 2, quick(told1).tell_every_rank(true));
  {
    Told told0;
    Heartbeat rank0(store, 0, 2, quick(told0).tell_every_rank(true));
    rank0.raise("rank 0: leaving to re-form");
  }  // ends at once, as a rank that leaves its group does
  ASSERT_TRUE(dpt::testing::wait_until([&] { return told1.lost.load(); }, std::chrono::seconds(30)));
  EXPECT_EQ(told1.loss, "rank 0: leaving to re-form");
}
