#include "dptrain/launch/node_rendezvous.h"

#include <gtest/gtest.h>
#include <torch/csrc/distributed/c10d/HashStore.hpp>

#include <algorithm>
#include <future>
#include <mutex>
#include <set>
#include <thread>

#include "dptrain/common/error.h"

using dpt::launch::Membership;
using dpt::launch::NodeRendezvous;
using dpt::launch::NodeRendezvousOptions;

namespace {

using namespace std::chrono_literals;

// Launchers as threads over one in-memory store; the host hands out ports 40000, 40001, ...
class Launchers {
 public:
  explicit Launchers(int min_nodes, int max_nodes, std::chrono::milliseconds last_call = 300ms)
      : min_(min_nodes), max_(max_nodes), last_call_(last_call) {}

  NodeRendezvousOptions options(std::optional<std::string> token = std::nullopt) {
    return NodeRendezvousOptions(min_, max_)
        .last_call(last_call_)
        .timeout(2s)
        .job_token(std::move(token))
        .choose_worker_port([this] { return next_port_++; })
        .report([this](const std::string& line) {
          std::lock_guard<std::mutex> lock(mutex_);
          reports_.push_back(line);
        });
  }
  std::unique_ptr<NodeRendezvous> host(std::optional<std::string> token = std::nullopt) {
    return std::make_unique<NodeRendezvous>(store_, true, "job", options(std::move(token)));
  }
  std::unique_ptr<NodeRendezvous> guest(std::optional<std::string> token = std::nullopt) {
    return std::make_unique<NodeRendezvous>(store_, false, "job", options(std::move(token)));
  }
  std::vector<std::string> reports() {
    std::lock_guard<std::mutex> lock(mutex_);
    return reports_;
  }

 private:
  c10::intrusive_ptr<c10d::HashStore> store_ = c10::make_intrusive<c10d::HashStore>();
  int min_, max_;
  std::chrono::milliseconds last_call_;
  std::atomic<int> next_port_{40000};
  std::mutex mutex_;
  std::vector<std::string> reports_;
};

// The host's reports of the rounds it formed, in order.
std::vector<std::string> rounds_formed(Launchers& job) {
  std::vector<std::string> lines;
  for (const auto& line : job.reports()) {
    if (line.find(" formed with ") != std::string::npos) lines.push_back(line);
  }
  return lines;
}

std::future<std::optional<Membership>> next_round_async(NodeRendezvous& node) {
  return std::async(std::launch::async, [&node] { return node.next_round(); });
}

// reformation_due() reads the store once a second: ask until it says yes, for at most 3 s.
bool becomes_due(NodeRendezvous& node) {
  for (auto until = std::chrono::steady_clock::now() + 3s; std::chrono::steady_clock::now() < until;) {
    if (node.reformation_due()) return true;
    std::this_thread::sleep_for(50ms);
  }
  return false;
}

}  // namespace

TEST(NodeRendezvous, ARoundTakesEveryNodeUpToTheMaximum) {
  Launchers job(2, 3, 2s);
  auto host = job.host();
  auto a = job.guest(), b = job.guest();
  auto fa = next_round_async(*a), fb = next_round_async(*b);
  const Membership mine = *host->next_round();
  const Membership ma = *fa.get(), mb = *fb.get();
  EXPECT_EQ(mine.round, 0);
  EXPECT_EQ(mine.node_rank, 0);
  EXPECT_EQ(mine.nnodes, 3);
  EXPECT_EQ(std::set<int>({ma.node_rank, mb.node_rank}), std::set<int>({1, 2}));
  EXPECT_EQ(ma.nnodes, 3);
  EXPECT_EQ(ma.master_port, mine.master_port);
  EXPECT_EQ(mb.master_port, 40000);
  EXPECT_EQ(rounds_formed(job), std::vector<std::string>({"round 0 formed with 3 node(s)"})) << "closed when full";
}

TEST(NodeRendezvous, ClosesWithTheMinimumAfterTheLastCall) {
  Launchers job(2, 3);
  auto host = job.host();
  auto guest = job.guest();
  auto joined = next_round_async(*guest);
  const auto start = std::chrono::steady_clock::now();
  EXPECT_EQ(host->next_round()->nnodes, 2);
  EXPECT_GE(std::chrono::steady_clock::now() - start, 300ms);
  EXPECT_EQ(joined.get()->node_rank, 1);
  EXPECT_EQ(rounds_formed(job), std::vector<std::string>({"round 0 formed with 2 node(s) as the last call ended"}));
  const auto reports = job.reports();
  EXPECT_NE(std::find(reports.begin(), reports.end(),
                      "round 0: 2 node(s) of at most 3 have joined; the last call for the others ends in 0.3 s"),
            reports.end());
}

TEST(NodeRendezvous, TooFewNodesIsATimeoutThatSaysSo) {
  Launchers job(2, 2);
  auto host = job.host();
  try {
    host->next_round();
    FAIL() << "expected a TimeoutError";
  } catch (const dpt::TimeoutError& e) {
    EXPECT_NE(std::string(e.what()).find("only 1 of at least 2 node(s) joined"), std::string::npos) << e.what();
  }
}

TEST(NodeRendezvous, ReformsWithoutALostNodeThenAdmitsANewOne) {
  // A last call long enough that only a node that never comes ends one, however loaded the machine.
  Launchers job(1, 3, 2s);
  auto host = job.host();
  auto a = job.guest(), lost = job.guest();
  auto fa = next_round_async(*a), flost = next_round_async(*lost);
  ASSERT_EQ(host->next_round()->nnodes, 3);
  fa.get();
  flost.get();
  EXPECT_FALSE(host->reformation_due());

  // `lost` dies; `a`'s workers fail and it asks for a re-formation, which every node sees.
  a->request_reformation();
  EXPECT_TRUE(becomes_due(*host));
  fa = next_round_async(*a);
  const Membership second = *host->next_round();  // waits the last call for `lost`, then closes
  EXPECT_EQ(second.round, 1);
  EXPECT_EQ(second.nnodes, 2);
  EXPECT_EQ(fa.get()->node_rank, 1);

  // A node that comes back waits for the next round and asks for it: the round has room.
  auto back = job.guest();
  auto fback = next_round_async(*back);
  EXPECT_TRUE(becomes_due(*host));
  EXPECT_TRUE(becomes_due(*a));
  fa = next_round_async(*a);
  const Membership third = *host->next_round();
  EXPECT_EQ(third.nnodes, 3);
  // The second round waited for `lost`; every node was back for the third, which did not wait.
  EXPECT_EQ(rounds_formed(job), std::vector<std::string>({"round 0 formed with 3 node(s)",
                                                          "round 1 formed with 2 node(s) as the last call ended",
                                                          "round 2 formed with 3 node(s)"}));
  EXPECT_EQ(std::set<int>({fa.get()->node_rank, fback.get()->node_rank}), std::set<int>({1, 2}));
}

TEST(NodeRendezvous, AFullRoundLeavesANodeWaitingUntilTheJobEnds) {
  Launchers job(1, 1);
  auto host = job.host();
  ASSERT_EQ(host->next_round()->nnodes, 1);
  auto spare = job.guest();
  auto waited = next_round_async(*spare);
  std::this_thread::sleep_for(200ms);
  EXPECT_FALSE(becomes_due(*host)) << "a full round does not re-form for a waiting node";
  host->finish();
  EXPECT_FALSE(waited.get().has_value());
}

TEST(NodeRendezvous, ALauncherOfAnotherJobIsTurnedAwayAndTheHostSaysSo) {
  Launchers job(2, 2);
  auto host = job.host("secret");
  try {
    job.guest("another job's");
    FAIL() << "expected a DistError";
  } catch (const dpt::DistError& e) {
    EXPECT_NE(std::string(e.what()).find(": not admitted to the job: this process holds a different job token"),
              std::string::npos)
        << e.what();
  }
  EXPECT_THROW(job.guest(std::nullopt), dpt::DistError);
  auto guest = job.guest("secret");
  auto joined = next_round_async(*guest);
  EXPECT_EQ(host->next_round()->nnodes, 2);
  EXPECT_EQ(joined.get()->node_rank, 1);
  int refusals = 0;
  for (const auto& line : job.reports()) refusals += line.find("refused a process that tried to join") == 0;
  EXPECT_EQ(refusals, 2);
}
