// The hierarchical allreduce (transport/hierarchical/transport.h): four ranks as threads on two
// "machines" of two (their node numbers say so), each rank with a hierarchical transport and a flat
// Gloo one over the same job, so that every result is compared with the flat allreduce's.

#include <gtest/gtest.h>

#include <torch/csrc/distributed/c10d/HashStore.hpp>
#include <torch/csrc/distributed/c10d/PrefixStore.hpp>
#include <torch/torch.h>

#include "dist/transport/hierarchical/node_layout.h"
#include "dptrain/common/error.h"
#include "dptrain/dist/transport/transport.h"
#include "support/thread_ranks.h"

using dpt::dist::CollectiveRecord;
using dpt::dist::ReduceOp;
using dpt::dist::WorldInfo;
using dpt::dist::transport::hierarchical::layout_of;
using dpt::dist::transport::make_transport;
using dpt::dist::transport::TransportOptions;

// Named, not anonymous: the unit tests build as one unity source, and its names must not meet
// other files' (kTimeout, input_of, a Transport of the test support).
namespace hierarchical_test {

using Transport = dpt::dist::transport::Transport;
constexpr std::chrono::milliseconds kTimeout{30000};
const CollectiveRecord kSameOnEveryRank;

using Layout = std::vector<std::vector<int>>;

// Rank `rank` of `node_of_rank.size()`, on node node_of_rank[rank] with the others there.
WorldInfo on_node(const std::vector<int>& node_of_rank, int rank) {
  WorldInfo world;
  world.rank = rank;
  world.world_size = static_cast<int>(node_of_rank.size());
  world.node_rank = node_of_rank[rank];
  world.local_world_size = static_cast<int>(std::count(node_of_rank.begin(), node_of_rank.end(), world.node_rank));
  world.local_rank = static_cast<int>(std::count(node_of_rank.begin(), node_of_rank.begin() + rank, world.node_rank));
  return world;
}

// A transport of `world`'s job on `store` under `name`: hierarchical where `hierarchical`.
std::unique_ptr<Transport> transport_of(const dpt::compat::StorePtr& store, const std::string& name,
                                        const WorldInfo& world, bool hierarchical,
                                        std::chrono::milliseconds timeout = kTimeout) {
  auto prefixed = c10::make_intrusive<c10d::PrefixStore>(name, store);
  auto leaders = [world, timeout](const dpt::compat::StorePtr& group_store, int rank, int size) {
    WorldInfo group = world;
    group.rank = rank;
    group.world_size = size;
    return dpt::testing::loopback_gloo(group_store, group, timeout);
  };
  return make_transport(dpt::testing::loopback_gloo(prefixed, world, timeout), world,
                        TransportOptions()
                            .timeout(timeout)
                            .shared_memory(true)
                            .hierarchical(hierarchical)
                            .group_backend(leaders)
                            .store(prefixed));
}

// body(world, hierarchical, flat) on each rank of the job `node_of_rank` describes.
void run_job(const std::vector<int>& node_of_rank,
             const std::function<void(const WorldInfo&, Transport&, Transport&)>& body) {
  auto store = c10::make_intrusive<c10d::HashStore>();
  dpt::testing::run_rank_threads(static_cast<int>(node_of_rank.size()), [&](int rank) {
    const WorldInfo world = on_node(node_of_rank, rank);
    auto hierarchical = transport_of(store, "hierarchical", world, true);
    auto flat = transport_of(store, "flat", world, false);
    body(world, *hierarchical, *flat);
  });
}

// Values of magnitude 0.1 to 1 with either sign, distinct per rank.
at::Tensor input_of(int rank, int64_t numel, at::ScalarType dtype) {
  auto generator = at::detail::createCPUGenerator(1000 + rank);
  auto magnitude = at::empty({numel}, at::kDouble).uniform_(0.1, 1.0, generator);
  auto sign = at::empty({numel}, at::kDouble).bernoulli_(0.5, generator) * 2 - 1;
  return (magnitude * sign).to(dtype);
}

at::Tensor reduced(const at::Tensor& input, Transport& transport, ReduceOp op) {
  at::Tensor tensor = input.clone();
  transport.all_reduce(tensor, op, kSameOnEveryRank)->wait(kTimeout);
  return tensor;
}

TEST(NodeLayout, GroupsRanksByNodeAndOrdersMachinesByTheirFirstRank) {
  auto layout = layout_of({0, 0, 1, 1}, 3);
  EXPECT_EQ(layout.machines, (Layout{{0, 1}, {2, 3}}));
  EXPECT_EQ(layout.machine, 1);
  EXPECT_EQ(layout.local, 1);
  EXPECT_FALSE(layout.leads());
  EXPECT_TRUE(layout.pays());
  EXPECT_EQ(layout.describe(), "2 machines x 2 ranks");

  // Node numbers need not follow the ranks: node 7's lowest rank is 0, so it is machine 0.
  layout = layout_of({7, 3, 7, 3, 3}, 1);
  EXPECT_EQ(layout.machines, (Layout{{0, 2}, {1, 3, 4}}));
  EXPECT_EQ(layout.machine, 1);
  EXPECT_TRUE(layout.leads());
  EXPECT_EQ(layout.describe(), "2 machines of 2-3 ranks");
}

TEST(NodeLayout, PaysOnlyWithTwoMachinesAndOneOfThemShared) {
  EXPECT_FALSE(layout_of({0, 1, 2}, 0).pays());  // a rank per machine: the flat allreduce already
  EXPECT_FALSE(layout_of({0, 0, 0}, 0).pays());  // one machine: shared memory alone
  EXPECT_TRUE(layout_of({0, 0, 1}, 2).pays());
}

TEST(HierarchicalAllreduce, ChosenWhereMachinesRunSeveralRanksAndSaidSo) {
  run_job({0, 0, 1, 1}, [](const WorldInfo&, Transport& hierarchical, Transport& flat) {
    EXPECT_EQ(hierarchical.describe(), "gloo + hierarchical (2 machines x 2 ranks)");
    EXPECT_EQ(flat.describe(), "gloo");
    EXPECT_GT(hierarchical.failure_report_delay().count(), 0);
  });
  // A rank per machine: nothing to gain, and nothing said.
  run_job({0, 1}, [](const WorldInfo&, Transport& hierarchical, Transport&) {
    EXPECT_EQ(hierarchical.describe(), "gloo");
  });
}

// One rank that does not want it (DPTRAIN_HIERARCHICAL=0 on its node) keeps every rank flat; those
// that wanted it say why.
TEST(HierarchicalAllreduce, EveryRankStaysFlatWhenOneTurnsItOff) {
  auto store = c10::make_intrusive<c10d::HashStore>();
  const std::vector<int> nodes{0, 0, 1, 1};
  dpt::testing::run_rank_threads(4, [&](int rank) {
    auto transport = transport_of(store, "job", on_node(nodes, rank), /*hierarchical=*/rank != 2);
    EXPECT_EQ(transport->describe(), rank == 2 ? "gloo" : "gloo (not hierarchical: rank 2 turned it off)");
    auto sum = reduced(torch::full({5}, rank + 1.0), *transport, ReduceOp::Sum);
    EXPECT_TRUE(sum.equal(torch::full({5}, 10.0)));
  });
}

// Maximum, minimum and sums whose every partial sum is exact do not depend on the order: equal to
// the flat allreduce bit for bit, over sizes around shared memory's chunk (4 MiB: a million floats)
// and with machines of unequal size.
TEST(HierarchicalAllreduce, EqualsTheFlatAllreduceWhereTheOrderCannotMatter) {
  for (const auto& nodes : {std::vector<int>{0, 0, 1, 1}, std::vector<int>{0, 1, 1}}) {
    run_job(nodes, [](const WorldInfo& world, Transport& hierarchical, Transport& flat) {
      for (int64_t numel : {int64_t{1}, int64_t{1000}, int64_t{1} << 20, (int64_t{1} << 20) + 3}) {
        for (ReduceOp op : {ReduceOp::Max, ReduceOp::Min}) {
          const at::Tensor input = input_of(world.rank, numel, at::kFloat);
          EXPECT_TRUE(reduced(input, hierarchical, op).equal(reduced(input, flat, op))) << numel;
        }
        // Integers below 2^24 with a power-of-two world's mean: every sum and quotient is exact.
        const at::Tensor whole = (input_of(world.rank, numel, at::kDouble) * 1000).round();
        for (at::ScalarType dtype : {at::kFloat, at::kDouble}) {
          EXPECT_TRUE(reduced(whole.to(dtype), hierarchical, ReduceOp::Sum)
                          .equal(reduced(whole.to(dtype), flat, ReduceOp::Sum)))
              << numel;
        }
      }
    });
  }
}

// Float sums in another order: within the rounding bound of the two orders, (n - 1) * eps * sum
// |x_r| each, which a result that lost one rank's contribution (at least 0.1 / n here) is far
// outside: the negative control.
TEST(HierarchicalAllreduce, FloatMeansWithinRoundingOfTheFlatAllreduce) {
  constexpr int kWorld = 4;
  run_job({0, 0, 1, 1}, [](const WorldInfo& world, Transport& hierarchical, Transport& flat) {
    const int64_t numel = 300000;
    const at::Tensor input = input_of(world.rank, numel, at::kFloat);
    const at::Tensor ours = reduced(input, hierarchical, ReduceOp::Mean);
    const at::Tensor theirs = reduced(input, flat, ReduceOp::Mean);
    at::Tensor magnitude = torch::zeros({numel}, at::kDouble);
    for (int r = 0; r < kWorld; ++r) magnitude += input_of(r, numel, at::kDouble).abs() / kWorld;
    const at::Tensor bound = 2 * (kWorld - 1) * std::numeric_limits<float>::epsilon() * magnitude;
    const at::Tensor gap = (ours.to(at::kDouble) - theirs.to(at::kDouble)).abs();
    EXPECT_TRUE(gap.le(bound).all().item<bool>()) << "largest gap " << gap.max().item<double>();
    EXPECT_GT(gap.max().item<double>(), 0) << "no element differs: the orders were the same after all";
    const at::Tensor without_rank_3 = theirs.to(at::kDouble) - input_of(3, numel, at::kDouble) / kWorld;
    EXPECT_TRUE((ours.to(at::kDouble) - without_rank_3).abs().gt(bound).all().item<bool>());
  });
}

// Many operations in flight at once, float ones through the hierarchy and others (int64, half)
// through the job's Gloo, each ending where it should.
TEST(HierarchicalAllreduce, OperationsInFlightTogetherEndRight) {
  run_job({0, 0, 1, 1}, [](const WorldInfo& world, Transport& hierarchical, Transport&) {
    std::vector<at::Tensor> tensors;
    std::vector<c10::intrusive_ptr<c10d::Work>> works;
    for (int i = 0; i < 6; ++i) {
      tensors.push_back(torch::full({1000 * (i + 1)}, world.rank + i, i % 3 == 2 ? at::kLong : at::kFloat));
      works.push_back(hierarchical.all_reduce(tensors.back(), i % 2 ? ReduceOp::Max : ReduceOp::Sum, kSameOnEveryRank));
    }
    for (auto& work : works) work->wait(kTimeout);
    for (int i = 0; i < 6; ++i) {
      const double expected = i % 2 ? 3 + i : 6 + 4 * i;
      EXPECT_TRUE(tensors[i].eq(expected).all().item<bool>()) << "operation " << i << ": " << tensors[i][0];
    }
  });
}

// One tensor reduced twice without waiting between: the second reduction reads what the first's
// broadcast wrote (it waits for it), so each rank's 1..4 sum to 10, then four tens to 40.
TEST(HierarchicalAllreduce, TheSameTensorTwiceInFlightSumsTheSums) {
  run_job({0, 0, 1, 1}, [](const WorldInfo& world, Transport& hierarchical, Transport&) {
    for (int64_t numel : {int64_t{1}, int64_t{3} << 20}) {
      at::Tensor tensor = torch::full({numel}, world.rank + 1.0f);
      auto first = hierarchical.all_reduce(tensor, ReduceOp::Sum, kSameOnEveryRank);
      auto second = hierarchical.all_reduce(tensor, ReduceOp::Sum, kSameOnEveryRank);
      first->wait(kTimeout);
      second->wait(kTimeout);
      EXPECT_TRUE(tensor.eq(40.0f).all().item<bool>()) << numel << ": " << tensor[0];
    }
  });
}

// A rank that reduces another size than its machine's other rank fails there, at once, naming both;
// the other machine's ranks, whose leader then waits in vain, fail at their bound. No rank hangs.
TEST(HierarchicalAllreduce, RanksThatDisagreeFailOnEveryRank) {
  auto store = c10::make_intrusive<c10d::HashStore>();
  const std::vector<int> nodes{0, 0, 1, 1};
  std::vector<std::string> messages(4);
  dpt::testing::run_rank_threads(4, [&](int rank) {
    auto transport = transport_of(store, "job", on_node(nodes, rank), true, std::chrono::seconds(3));
    try {
      transport->all_reduce(torch::ones({rank == 3 ? 65 : 64}), ReduceOp::Sum, kSameOnEveryRank)
          ->wait(std::chrono::seconds(30));
    } catch (const std::exception& e) {
      messages[rank] = e.what();
    }
  });
  for (int rank : {2, 3}) {
    EXPECT_NE(
        messages[rank].find("rank 2: reduce(sum) to rank 2 of 64 Float\n    rank 3: reduce(sum) to rank 2 of 65 Float"),
        std::string::npos)
        << messages[rank];
  }
  for (int rank : {0, 1}) EXPECT_FALSE(messages[rank].empty()) << "rank " << rank << " did not fail";
}

}  // namespace hierarchical_test
