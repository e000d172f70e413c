#include <gtest/gtest.h>

#include <future>
#include <mutex>
#include <string>
#include <vector>

#include <torch/csrc/distributed/c10d/HashStore.hpp>
#include <torch/csrc/distributed/c10d/TCPStore.hpp>

#include "dptrain/common/error.h"
#include "dptrain/compat/tcp_store.h"
#include "dptrain/dist/init_method.h"
#include "dptrain/dist/rendezvous.h"
#include "support/error_of.h"
#include "support/thread_ranks.h"

using namespace std::chrono_literals;
using dpt::dist::InitMethod;
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

TEST(Join, ARankWithoutRankZeroSaysSoAtTheTimeout) {
  c10d::HashStore store;
  RendezvousOptions options(200ms);
  options.address = "10.0.0.1:29500";
  EXPECT_EQ(dpt::testing::error_of<dpt::TimeoutError>([&] { join(store, local_world(1, 2), options); }),
            "rank 1: rendezvous timed out after 0.2 s: rank 0, which opens it, did not. Check that rank 0 was "
            "started, with the same master address and port (here 10.0.0.1:29500), or raise the rendezvous timeout "
            "(--rendezvous-timeout).");
}

TEST(Join, RankOutsideTheWorld) {
  c10d::HashStore store;
  EXPECT_THROW(join(store, local_world(2, 2), RendezvousOptions(1s)), dpt::ConfigError);
}

namespace {

// The progress lines `world` reports while it waits alone (or with `others`) for `timeout`.
struct Reported {
  std::mutex mutex;
  std::vector<std::string> lines;
};

RendezvousOptions reporting(std::chrono::milliseconds timeout, Reported& reported) {
  RendezvousOptions options(timeout);
  options.address = "10.0.0.1:29500";
  options.first_report = 50ms;
  options.report = [&reported](const std::string& line) {
    std::lock_guard<std::mutex> lock(reported.mutex);
    reported.lines.push_back(line);
  };
  return options;
}

}  // namespace

TEST(Join, RankZeroSaysWhoIsMissingWhileItWaitsThenGivesUp) {
  c10d::HashStore store;
  Reported reported;
  std::string error;
  try {
    join(store, local_world(0, 3), reporting(700ms, reported));
  } catch (const dpt::TimeoutError& e) {
    error = e.what();
  }
  expect_contains(error, "missing rank(s) 1, 2. Check that every rank was started, with the same master address and "
                         "port (here 10.0.0.1:29500)");
  ASSERT_FALSE(reported.lines.empty());
  expect_contains(reported.lines[0], "rank 0: rendezvous at 10.0.0.1:29500: 1 of 3 ranks joined (0); waiting for "
                                     "rank(s) 1, 2; waited 0 s, giving up in ");
  // Doubling intervals from 50 ms: at most 50, 150, 350 and 750 ms into a 700 ms wait.
  EXPECT_LE(reported.lines.size(), 4u);
}

TEST(Join, OtherRanksReportOnlyWhenAsked) {
  for (bool all_ranks_report : {false, true}) {
    c10d::HashStore store;
    Reported reported;
    RendezvousOptions options = reporting(300ms, reported);
    options.all_ranks_report = all_ranks_report;
    EXPECT_THROW(join(store, local_world(1, 2), options), dpt::TimeoutError);
    EXPECT_EQ(reported.lines.empty(), !all_ranks_report);
    if (all_ranks_report) {
      ASSERT_FALSE(reported.lines.empty());
      expect_contains(reported.lines[0], "rank 1: rendezvous at 10.0.0.1:29500: waiting for rank 0 to open it; waited 0 s");
    }
  }
}

TEST(Join, ProgressNamesTheNodesOfAJobOfSeveral) {
  c10d::HashStore store;
  Reported reported;
  WorldInfo node0_rank1 = local_world(1, 4);
  node0_rank1.local_world_size = 2;
  auto other = std::async(std::launch::async, [&] {
    WorldInfo node0_rank0 = local_world(0, 4);
    node0_rank0.local_world_size = 2;
    EXPECT_THROW(join(store, node0_rank0, reporting(500ms, reported)), dpt::TimeoutError);
  });
  EXPECT_THROW(join(store, node0_rank1, RendezvousOptions(500ms)), dpt::TimeoutError);
  other.get();
  ASSERT_FALSE(reported.lines.empty());
  expect_contains(reported.lines.back(), "2 of 4 ranks joined (0, 1 (node 0)); waiting for rank(s) 2, 3 (node 1);");
}

namespace {

RendezvousOptions holding(std::optional<std::string> token, std::chrono::milliseconds timeout = 5s) {
  RendezvousOptions options(timeout);
  options.job_token = std::move(token);
  return options;
}

}  // namespace

TEST(Join, RanksHoldingTheJobsTokenMeet) {
  c10d::HashStore store;
  auto r1 = std::async(std::launch::async, [&] { join(store, local_world(1, 2), holding("secret")); });
  join(store, local_world(0, 2), holding("secret"));
  r1.get();
}

TEST(Join, AProcessOfAnotherJobIsTurnedAwayAndTheJobGoesOn) {
  c10d::HashStore store;
  Reported reported;
  RendezvousOptions rank0 = reporting(5s, reported);
  rank0.job_token = "secret";
  auto r0 = std::async(std::launch::async, [&] { join(store, local_world(0, 2), rank0); });
  // Another job's rank 1, pointed at this job's port: refused before it takes rank 1.
  const std::string refused =
      dpt::testing::error_of<dpt::DistError>([&] { join(store, local_world(1, 2), holding("another job's")); });
  expect_contains(refused, "rank 1: not admitted to the job: this process holds a different job token.");
  join(store, local_world(1, 2), holding("secret"));
  r0.get();
  std::lock_guard<std::mutex> lock(reported.mutex);
  ASSERT_FALSE(reported.lines.empty());
  expect_contains(reported.lines[0], "rank 0: refused a process that tried to join 10.0.0.1:29500 (rank 1: this "
                                     "process holds a different job token); the job goes on");
}

TEST(Join, ARankTakenWithoutTheTokenStopsTheJob) {
  c10d::HashStore store;
  // What a client that skipped the admission could write: a claim, a made-up proof, a world size.
  store.add("dpt/claim/1", 1);
  const std::string made_up(64, 'a'), two = "2";
  store.set("dpt/proof/1", std::vector<uint8_t>(made_up.begin(), made_up.end()));
  store.set("dpt/world_size/1", std::vector<uint8_t>(two.begin(), two.end()));
  EXPECT_EQ(dpt::testing::error_of<dpt::DistError>([&] { join(store, local_world(0, 2), holding("secret")); }),
            "rank 0: rank 1 was taken by a process that does not hold this job's token: something other than this "
            "job's processes reaches its rendezvous store. Stop it, and keep the job's address and port private "
            "(docs/security.md)");
  // Without a token the same claim is a rank like any other: the check above is the token's.
  c10d::HashStore open_store;
  open_store.add("dpt/claim/1", 1);
  open_store.set("dpt/world_size/1", std::vector<uint8_t>(two.begin(), two.end()));
  join(open_store, local_world(0, 2), holding(std::nullopt));
}

namespace {

// A store listening on a free port of 127.0.0.1, as torchrun's agent hosts one.
c10::intrusive_ptr<c10d::TCPStore> agent_store() {
  c10d::TCPStoreOptions options = dpt::compat::tcp_store_options();
  options.port = 0;
  options.isServer = true;
  options.waitWorkers = false;
  options.timeout = std::chrono::seconds(10);
  return c10::make_intrusive<c10d::TCPStore>("127.0.0.1", options);
}

// Every rank of `world_size` rendezvous through `method` as torchrun's round `restart` starts
// them, its agent's store at 127.0.0.1:`port`; "" per rank that joined, else its error. Each rank
// keeps its store until every rank has joined, as a process keeps it in its process group: rank 0
// dropping the store it hosts while rank 1 still reads from it would fail rank 1.
std::vector<std::string> torchrun_round(int port, int world_size, int restart, const InitMethod& method = {}) {
  struct Joined {
    std::string error;
    dpt::compat::StorePtr store;
  };
  std::vector<std::future<Joined>> ranks;
  for (int r = 0; r < world_size; ++r) {
    WorldInfo w = local_world(r, world_size);
    w.master_port = port;
    w.agent_store = dpt::dist::StoreAddress{w.master_addr, port};
    w.restart_count = restart;
    ranks.push_back(std::async(std::launch::async, [w, method]() -> Joined {
      try {
        return {"", dpt::dist::rendezvous(method, w, RendezvousOptions(5s))};
      } catch (const dpt::Error& e) {
        return {e.what(), {}};
      }
    }));
  }
  std::vector<Joined> joined;
  for (auto& f : ranks) joined.push_back(f.get());
  std::vector<std::string> errors;
  for (const auto& j : joined) errors.push_back(j.error);
  return errors;
}

}  // namespace

// torchrun's agent holds the port (TORCHELASTIC_USE_AGENT_STORE=True): no rank may listen on it,
// and each restart round keys its own namespace in the store that outlives it, as PyTorch's
// workers do; a second round in the same namespace would find the first's ranks already joined.
TEST(Rendezvous, UnderTorchrunsAgentStoreEveryRankIsAClientOfItsRound) {
  auto agent = agent_store();
  const int port = agent->getPort();
  EXPECT_EQ(torchrun_round(port, 2, 0), std::vector<std::string>(2, ""));
  EXPECT_TRUE(agent->check({"/worker/attempt_0/dpt/world_size/1"}));
  EXPECT_FALSE(agent->check({"dpt/world_size/1"}));
  EXPECT_EQ(torchrun_round(port, 2, 1), std::vector<std::string>(2, ""));
  EXPECT_TRUE(agent->check({"/worker/attempt_1/dpt/world_size/0"}));
}

// A tcp:// address of the job's own under torchrun's agent: rank 0 hosts a store there, as it
// would without torchrun, and the agent's store is left alone. (Taken for the agent's, the ranks
// would all wait as clients for a store nobody serves.)
TEST(Rendezvous, UnderTorchrunsAgentStoreAnAddressOfTheJobsOwnIsRankZeros) {
  auto agent = agent_store();
  InitMethod own;
  own.kind = InitMethod::Kind::Tcp;
  own.host = "127.0.0.1";
  own.port = agent_store()->getPort();  // free again once that store is gone
  own.url = "tcp://127.0.0.1:" + std::to_string(own.port);
  EXPECT_EQ(torchrun_round(agent->getPort(), 2, 0, own), std::vector<std::string>(2, ""));
  EXPECT_FALSE(agent->check({"/worker/attempt_0/dpt/world_size/0"}));
  EXPECT_FALSE(agent->check({"dpt/world_size/0"}));
}

// Outside torchrun's agent store, rank 0 still hosts the store itself: on a port something else
// holds it says so.
TEST(Rendezvous, RankZeroOnABusyPortSaysSo) {
  auto agent = agent_store();
  WorldInfo w = local_world(0, 2);
  w.master_port = agent->getPort();
  const std::string error = dpt::testing::error_of<dpt::DistError>(
      [&] { dpt::dist::rendezvous(dpt::dist::InitMethod{}, w, RendezvousOptions(2s)); });
  expect_contains(error, "the port is busy");
}
