#include <gtest/gtest.h>

#include <thread>

#include "dptrain/dist/transport/transport.h"
#include "support/thread_ranks.h"

using dpt::dist::ReduceOp;
using dpt::dist::transport::make_transport;
using dpt::dist::transport::TransportOptions;

namespace {

constexpr std::chrono::milliseconds kTimeout{30000};

// What every rank says of its all_reduce: the same, so the transports' agreement checks pass.
const dpt::dist::CollectiveRecord kSameOnEveryRank;

// Two ranks as threads, each with its own Gloo backend; body(rank, backend, store) runs on each.
void run_two(const std::function<void(const dpt::dist::WorldInfo&, dpt::compat::BackendPtr, dpt::compat::StorePtr)>& body,
             bool same_host = true) {
  dpt::compat::StorePtr store = c10::make_intrusive<c10d::HashStore>();
  std::vector<std::string> failures(2);
  std::vector<std::thread> threads;
  for (int rank = 0; rank < 2; ++rank) {
    threads.emplace_back([&, rank] {
      try {
        auto world = dpt::testing::local_world(rank, 2);
        if (!same_host) world.local_world_size = 1;
        body(world, dpt::testing::loopback_gloo(store, world, kTimeout), store);
      } catch (const std::exception& e) {
        failures[rank] = e.what();
      }
    });
  }
  for (auto& thread : threads) thread.join();
  EXPECT_EQ(failures[0], "");
  EXPECT_EQ(failures[1], "");
}

}  // namespace

TEST(Transport, ThroughTheBackendWhenSharedMemoryIsNotAsked) {
  run_two([](const auto& world, auto backend, auto store) {
    auto transport = make_transport(backend, world, TransportOptions().timeout(kTimeout).store(store));
    EXPECT_EQ(transport->describe(), "gloo");
    EXPECT_EQ(transport->failure_report_delay().count(), 0);
  });
}

TEST(Transport, ThroughTheBackendWhenRanksAreOnOtherHosts) {
  run_two(
      [](const auto& world, auto backend, auto store) {
        auto transport =
            make_transport(backend, world, TransportOptions().timeout(kTimeout).shared_memory(true).store(store));
        EXPECT_EQ(transport->describe(), "gloo");
      },
      /*same_host=*/false);
}

// Gloo has no average: the process-group transport divides before the sum, so that the result is
// final when the work completes and equals PyTorch's reducer's (x / n summed).
TEST(Transport, BackendMeanIsFinalWhenTheWorkCompletes) {
  run_two([](const auto& world, auto backend, auto store) {
    auto transport = make_transport(backend, world, TransportOptions().timeout(kTimeout).store(store));
    auto t = torch::tensor({1.0f, 3.0f, 1e-3f}) * (world.rank + 1);
    auto expected = t / 2 + t * (world.rank == 0 ? 2 : 0.5) / 2;
    transport->all_reduce(t, ReduceOp::Mean, kSameOnEveryRank)->wait(kTimeout);
    EXPECT_TRUE(t.equal(expected)) << t;
  });
}

// Shared memory takes float tensors and passes the rest to the backend; both give exact results.
TEST(Transport, SharedMemoryTakesFloatsAndPassesTheRestOn) {
  run_two([](const auto& world, auto backend, auto store) {
    auto transport =
        make_transport(backend, world, TransportOptions().timeout(kTimeout).shared_memory(true).store(store));
    EXPECT_EQ(transport->describe(), "gloo + shared memory");
    EXPECT_GT(transport->failure_report_delay().count(), 0);
    auto mean = torch::full({3}, world.rank + 1.0, torch::kDouble);
    transport->all_reduce(mean, ReduceOp::Mean, kSameOnEveryRank)->wait(kTimeout);
    EXPECT_TRUE(mean.equal(torch::full({3}, 1.5, torch::kDouble))) << mean;
    auto counts = torch::full({3}, world.rank + 1, torch::kLong);
    transport->all_reduce(counts, ReduceOp::Sum, kSameOnEveryRank)->wait(kTimeout);
    EXPECT_TRUE(counts.equal(torch::full({3}, 3, torch::kLong))) << counts;
  });
}

// Every operation the communicator offers travels through the transport, on either kind: a
// broadcast, a gather (floats through shared memory where it is there, integers through Gloo), a
// reduce-scatter (none native over Gloo, so the communicator is told to all-reduce instead), and
// point to point.
TEST(Transport, CarriesEveryOperationOnEitherKind) {
  for (const bool shared_memory : {false, true}) {
    SCOPED_TRACE(shared_memory ? "shared memory" : "gloo");
    run_two([shared_memory](const auto& world, auto backend, auto store) {
      auto transport = make_transport(
          backend, world, TransportOptions().timeout(kTimeout).shared_memory(shared_memory).store(store));
      const double r = world.rank;

      auto rooted = torch::full({4}, r + 1.0);
      transport->broadcast(rooted, /*root=*/1, kSameOnEveryRank)->wait(kTimeout);
      EXPECT_TRUE(rooted.equal(torch::full({4}, 2.0))) << rooted;

      for (const auto type : {torch::kFloat, torch::kLong}) {
        auto gathered = torch::empty({6}, type);
        transport->all_gather(torch::arange(3, type) + 10 * world.rank, gathered, kSameOnEveryRank)->wait(kTimeout);
        EXPECT_TRUE(gathered.equal(torch::tensor({0, 1, 2, 10, 11, 12}, type))) << gathered;
      }

      EXPECT_FALSE(transport->scatters(torch::ones({4}), ReduceOp::Sum)) << "Gloo has no reduce_scatter";
      EXPECT_TRUE(transport->reduces(torch::kFloat));
      EXPECT_EQ(transport->backend_name(), "gloo");

      auto message = torch::full({5}, 7.0);
      if (world.rank == 0) {
        transport->send(message, /*peer=*/1, /*tag=*/3)->wait(kTimeout);
      } else {
        auto received = torch::zeros({5});
        transport->recv(received, /*peer=*/0, /*tag=*/3)->wait(kTimeout);
        EXPECT_TRUE(received.equal(message)) << received;
      }
    });
  }
}
