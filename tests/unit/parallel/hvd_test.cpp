#include <gtest/gtest.h>

#include <map>
#include <thread>

#include <torch/torch.h>

#include "dptrain/common/error.h"
#include "dptrain/compat/compat.h"
#include "dptrain/parallel/ddp.h"
#include "dptrain/parallel/hvd.h"
#include "support/error_of.h"
#include "support/temp_dir.h"
#include "support/thread_ranks.h"
#include "support/tiny_training.h"

namespace {

namespace F = torch::nn::functional;
namespace hvd = dpt::hvd;
using dpt::dist::Communicator;
using dpt::testing::Batches;
using dpt::testing::borrow;
using dpt::testing::error_of;
using dpt::testing::fill;
using dpt::testing::make_batches;
using dpt::testing::make_mlp;
using dpt::testing::max_difference;
using dpt::testing::sgd;
using dpt::testing::train_ddp;
using dpt::testing::train_reference;

// 104-byte fusion buffers: three of them for the MLP, as in the DDP tests.
constexpr int64_t kSmallFusion = 104;

// Each rank its slice of every batch, in `options.backward_passes_per_step()` micro-batches whose
// losses are divided by that count. Rank r starts from other weights; broadcast_parameters makes
// them rank 0's.
std::vector<at::Tensor> train_hvd(const hvd::Context& ctx, const Batches& data, uint64_t seed,
                                  hvd::DistributedOptimizerOptions options) {
  auto model = make_mlp();
  fill(*model, seed + ctx.rank());
  dpt::hvd::broadcast_parameters(ctx, model->named_parameters(), /*root_rank=*/0);
  auto sgd_optimizer = std::make_shared<torch::optim::SGD>(model->parameters(), sgd());
  hvd::DistributedOptimizer optimizer(ctx, sgd_optimizer, model->named_parameters(),
                                      options.fusion_threshold_bytes(kSmallFusion));
  // Fusion buffers of the threshold all along, as Horovod's.
  EXPECT_EQ(optimizer.reducer().bucket_indices(), (std::vector<std::vector<size_t>>{{5, 4}, {3, 2}, {1, 0}}));
  const int64_t k = options.backward_passes_per_step();
  const int64_t micro = data.x.size(1) / ctx.size() / k;
  for (int64_t s = 0; s < data.x.size(0); ++s) {
    optimizer.zero_grad();
    for (int64_t j = 0; j < k; ++j) {
      const int64_t first = (ctx.rank() * k + j) * micro;
      auto loss = F::cross_entropy(model->forward(data.x[s].narrow(0, first, micro)), data.y[s].narrow(0, first, micro));
      (loss / k).backward();
    }
    optimizer.step();
  }
  return model->parameters();
}

// The same reducer, buckets and mean allreduce as DDP: after 12 SGD steps with momentum and weight
// decay the weights agree with DDP's to 1e-6 (they came out identical when written) and with one
// process on the joined batch to 1e-5, DDP's own tolerance.
TEST(HvdDistributedOptimizer, MatchesDdpAndOneProcessWithTheJoinedBatch) {
  const Batches data = make_batches(/*steps=*/12, /*batch=*/2 * 4);
  const auto expected = train_reference(data, 100);
  dpt::testing::run_ranks(2, [&](Communicator& comm) {
    hvd::Context ctx(borrow(comm));
    const auto with_hvd = train_hvd(ctx, data, 100, hvd::DistributedOptimizerOptions());
    const auto with_ddp = train_ddp(comm, data, 100);
    EXPECT_LE(max_difference(with_hvd, with_ddp), 1e-6) << "rank " << comm.rank();
    EXPECT_LE(max_difference(with_hvd, expected), 1e-5) << "rank " << comm.rank();
  });
}

TEST(HvdDistributedOptimizer, SumGivesWorldSizeTimesTheAverage) {
  const Batches data = make_batches(1, 3 * 2);
  dpt::testing::run_ranks(3, [&](Communicator& comm) {
    hvd::Context ctx(borrow(comm));
    std::vector<std::vector<at::Tensor>> grads;
    for (auto op : {hvd::ReduceOp::Average, hvd::ReduceOp::Sum}) {
      auto model = make_mlp();
      fill(*model, 3);
      auto optimizer = std::make_shared<torch::optim::SGD>(model->parameters(), sgd());
      hvd::DistributedOptimizer distributed(ctx, optimizer, model->named_parameters(),
                                            hvd::DistributedOptimizerOptions().op(op));
      distributed.zero_grad();
      F::cross_entropy(model->forward(data.x[0].narrow(0, comm.rank() * 2, 2)), data.y[0].narrow(0, comm.rank() * 2, 2))
          .backward();
      distributed.synchronize();
      std::vector<at::Tensor> g;
      for (const auto& p : model->parameters()) g.push_back(p.grad().clone());
      grads.push_back(g);
    }
    std::vector<at::Tensor> scaled;
    for (const auto& g : grads[0]) scaled.push_back(g * 3);
    EXPECT_LE(max_difference(grads[1], scaled), 1e-6) << "rank " << comm.rank();
    EXPECT_GT(grads[1][0].abs().max().item<double>(), 1e-3);
  });
}

// Two backward passes of half the rank's batch (losses halved) per step equal one process on the
// joined batch, as one pass of the whole rank's batch does.
TEST(HvdDistributedOptimizer, TwoBackwardPassesPerStepEqualOneStepOnTheDoubleBatch) {
  const Batches data = make_batches(/*steps=*/4, /*batch=*/2 * 2 * 2);
  const auto expected = train_reference(data, 100);
  dpt::testing::run_ranks(2, [&](Communicator& comm) {
    hvd::Context ctx(borrow(comm));
    const auto trained = train_hvd(ctx, data, 100, hvd::DistributedOptimizerOptions().backward_passes_per_step(2));
    EXPECT_LE(max_difference(trained, expected), 1e-5) << "rank " << comm.rank();
  });
}

TEST(HvdDistributedOptimizer, StepOrZeroGradBetweenThePassesOfAStepIsAnError) {
  const Batches data = make_batches(1, 4);
  dpt::testing::run_ranks(2, [&](Communicator& comm) {
    hvd::Context ctx(borrow(comm));
    auto model = make_mlp();
    auto optimizer = std::make_shared<torch::optim::SGD>(model->parameters(), sgd());
    hvd::DistributedOptimizer distributed(ctx, optimizer, model->named_parameters(),
                                          hvd::DistributedOptimizerOptions().backward_passes_per_step(2));
    F::cross_entropy(model->forward(data.x[0]), data.y[0]).backward();
    EXPECT_EQ(error_of<dpt::ConfigError>([&] { distributed.step(); }),
              dpt::str("rank ", comm.rank(), ": hvd::DistributedOptimizer: step() or synchronize() after 1 of 2 "
                       "backward passes since the last step; gradients are reduced during the last of those "
                       "passes. Run backward_passes_per_step (2) backward passes before each step"));
    EXPECT_EQ(error_of<dpt::ConfigError>([&] { distributed.zero_grad(); }),
              dpt::str("rank ", comm.rank(), ": hvd::DistributedOptimizer: zero_grad() after 1 of 2 backward "
                       "passes of this step would drop their gradients; call zero_grad() before the first backward "
                       "pass of a step or after step()"));
    F::cross_entropy(model->forward(data.x[0]), data.y[0]).backward();
    distributed.step();  // the second pass reduced: the step goes through
  });
}

// DDP's fp16 tolerance: about 5x the difference seen after 20 steps; the lower bound shows the
// float16 path was taken.
TEST(HvdDistributedOptimizer, Fp16CompressionStaysNearTheExactResult) {
  const Batches data = make_batches(20, 8);
  const auto expected = train_reference(data, 100);
  dpt::testing::run_ranks(2, [&](Communicator& comm) {
    hvd::Context ctx(borrow(comm));
    const auto trained =
        train_hvd(ctx, data, 100, hvd::DistributedOptimizerOptions().compression(hvd::Compression::Fp16));
    const double difference = max_difference(trained, expected);
    EXPECT_LE(difference, 1e-3) << "rank " << comm.rank();
    EXPECT_GT(difference, 1e-6) << "rank " << comm.rank();
  });
}

TEST(HvdDistributedOptimizer, FusionThresholdFromTheEnvironmentZeroMeansOneTensorPerBuffer) {
  dpt::testing::TempDir dir;
  auto ctx = hvd::Context::create(dpt::dist::InitOptions().init_method("file://" + dir.path() + "/rendezvous"),
                                  dpt::Environment(std::map<std::string, std::string>{{"HOROVOD_FUSION_THRESHOLD", "0"}}));
  EXPECT_EQ(ctx->fusion_threshold_bytes(), 0);
  auto model = make_mlp();
  auto optimizer = std::make_shared<torch::optim::SGD>(model->parameters(), sgd());
  hvd::DistributedOptimizer distributed(*ctx, optimizer, model->named_parameters());
  EXPECT_EQ(distributed.reducer().bucket_indices(),
            (std::vector<std::vector<size_t>>{{5}, {4}, {3}, {2}, {1}, {0}}));
}

TEST(HvdDistributedOptimizer, ParametersMissingFromNamedParametersAreNamed) {
  dpt::testing::run_ranks(1, [&](Communicator& comm) {
    hvd::Context ctx(borrow(comm));
    auto model = make_mlp();
    auto params = model->parameters();
    params.push_back(torch::zeros({2, 5}, torch::requires_grad()));
    auto optimizer = std::make_shared<torch::optim::SGD>(params, sgd());
    EXPECT_EQ(error_of<dpt::ConfigError>([&] { hvd::DistributedOptimizer d(ctx, optimizer, model->named_parameters()); }),
              "rank 0: hvd::DistributedOptimizer: parameter 6 of param group 0 (shape [2, 5]) is not in "
              "named_parameters; pass the named_parameters() of the model the optimizer trains");
  });
}

using StateMap = std::decay_t<decltype(std::declval<torch::optim::Optimizer&>().state())>;

const torch::optim::OptimizerParamState* state_of(torch::optim::Optimizer& optimizer, const at::Tensor& param) {
  auto it = optimizer.state().find(dpt::compat::optimizer_state_key<StateMap>(param));
  return it == optimizer.state().end() ? nullptr : it->second.get();
}

// Rank 0 has stepped (momentum buffers exist), rank 1 has not: Horovod's known pitfall. After the
// broadcast both hold rank 0's buffers and hyper-parameters; from a root without state, every
// rank's state becomes empty.
TEST(HvdBroadcastOptimizerState, MakesMomentumBuffersAndHyperParametersEqual) {
  const Batches data = make_batches(2, 4);
  dpt::testing::run_ranks(2, [&](Communicator& comm) {
    hvd::Context ctx(borrow(comm));
    auto model = make_mlp();
    fill(*model, 1);
    const bool root = comm.rank() == 0;
    auto optimizer = std::make_shared<torch::optim::SGD>(
        model->parameters(), torch::optim::SGDOptions(root ? 0.2 : 0.1).momentum(root ? 0.9 : 0.5));
    if (root) {
      for (int64_t s = 0; s < 2; ++s) {
        optimizer->zero_grad();
        F::cross_entropy(model->forward(data.x[s]), data.y[s]).backward();
        optimizer->step();
      }
    }
    EXPECT_EQ(optimizer->state().empty(), !root);
    dpt::hvd::broadcast_optimizer_state(ctx, *optimizer, /*root_rank=*/0);
    const auto& options = static_cast<const torch::optim::SGDOptions&>(optimizer->param_groups()[0].options());
    EXPECT_EQ(options.lr(), 0.2);
    EXPECT_EQ(options.momentum(), 0.9);
    for (const auto& p : model->parameters()) {
      const auto* state = dynamic_cast<const torch::optim::SGDParamState*>(state_of(*optimizer, p));
      ASSERT_NE(state, nullptr) << "rank " << comm.rank();
      const auto buffers = comm.all_gather(state->momentum_buffer());
      EXPECT_TRUE(buffers[0].equal(buffers[1]));
      EXPECT_GT(buffers[0].abs().max().item<double>(), 0);
    }
    dpt::hvd::broadcast_optimizer_state(ctx, *optimizer, /*root_rank=*/0);  // again: nothing changes
    auto fresh = std::make_shared<torch::optim::SGD>(model->parameters(), torch::optim::SGDOptions(0.3).momentum(0.9));
    if (root) {
      fresh->zero_grad();
      F::cross_entropy(model->forward(data.x[0]), data.y[0]).backward();
      fresh->step();
    }
    dpt::hvd::broadcast_optimizer_state(ctx, *fresh, /*root_rank=*/1);
    EXPECT_TRUE(fresh->state().empty()) << "rank " << comm.rank();
  });
}

TEST(HvdBroadcastOptimizerState, CarriesAdamMomentsAndStepCounts) {
  const Batches data = make_batches(3, 4);
  dpt::testing::run_ranks(2, [&](Communicator& comm) {
    hvd::Context ctx(borrow(comm));
    auto model = make_mlp();
    fill(*model, 1);
    auto adam = std::make_shared<torch::optim::Adam>(model->parameters(), torch::optim::AdamOptions(1e-2));
    if (comm.rank() == 1) {
      for (int64_t s = 0; s < 3; ++s) {
        adam->zero_grad();
        F::cross_entropy(model->forward(data.x[s]), data.y[s]).backward();
        adam->step();
      }
    }
    dpt::hvd::broadcast_optimizer_state(ctx, *adam, /*root_rank=*/1);
    for (const auto& p : model->parameters()) {
      const auto* state = dynamic_cast<const torch::optim::AdamParamState*>(state_of(*adam, p));
      ASSERT_NE(state, nullptr) << "rank " << comm.rank();
      EXPECT_EQ(state->step(), 3);
      const auto first = comm.all_gather(state->exp_avg());
      const auto second = comm.all_gather(state->exp_avg_sq());
      EXPECT_TRUE(first[0].equal(first[1]));
      EXPECT_TRUE(second[0].equal(second[1]));
    }
  });
}

TEST(HvdBroadcastOptimizerState, DifferentOptimizersFailOnEveryRank) {
  dpt::testing::run_ranks(2, [&](Communicator& comm) {
    hvd::Context ctx(borrow(comm));
    auto model = make_mlp();
    std::shared_ptr<torch::optim::Optimizer> optimizer;
    if (comm.rank() == 0) {
      optimizer = std::make_shared<torch::optim::SGD>(model->parameters(), sgd());
    } else {
      optimizer = std::make_shared<torch::optim::Adam>(model->parameters(), torch::optim::AdamOptions(1e-3));
    }
    EXPECT_EQ(error_of<dpt::ConfigError>([&] { dpt::hvd::broadcast_optimizer_state(ctx, *optimizer, 0); }),
              dpt::str("rank ", comm.rank(), ": hvd::broadcast_optimizer_state: rank 0 and rank 1 disagree at entry 0: "
                       "rank 0 passes a torch::optim::SGD, rank 1 passes a torch::optim::Adam. Every rank must build "
                       "the same optimizer over the same parameters and pass the same root"));
  });
}

TEST(HvdBroadcastParameters, CopiesRootsValuesIntoEveryRank) {
  dpt::testing::run_ranks(2, [&](Communicator& comm) {
    hvd::Context ctx(borrow(comm));
    auto model = make_mlp();
    fill(*model, 10 + comm.rank());
    auto from_root = make_mlp();
    fill(*from_root, 11);
    dpt::hvd::broadcast_parameters(ctx, model->named_parameters(), /*root_rank=*/1);
    EXPECT_EQ(max_difference(model->parameters(), from_root->parameters()), 0) << "rank " << comm.rank();
  });
}

TEST(HvdCollectives, AllreduceAllgatherBroadcastValues) {
  dpt::testing::run_ranks(3, [&](Communicator& comm) {
    hvd::Context ctx(borrow(comm));
    const double r = comm.rank();
    const auto value = torch::tensor({r + 1, 10 * (r + 1)}, torch::kDouble);
    EXPECT_TRUE(ctx.allreduce(value, "mean").equal(torch::tensor({2.0, 20.0}, torch::kDouble)));
    EXPECT_TRUE(ctx.allreduce(value, "sum", hvd::ReduceOp::Sum).equal(torch::tensor({6.0, 60.0}, torch::kDouble)));
    EXPECT_TRUE(ctx.allreduce(value, "max", hvd::ReduceOp::Max).equal(torch::tensor({3.0, 30.0}, torch::kDouble)));
    EXPECT_TRUE(value.equal(torch::tensor({r + 1, 10 * (r + 1)}, torch::kDouble)));  // input untouched
    EXPECT_TRUE(ctx.broadcast(value, 2, "from_two").equal(torch::tensor({3.0, 30.0}, torch::kDouble)));
    // Rank r contributes r rows [10r + i, 10r + i]; rank 0 none.
    const auto rows = comm.rank() == 0 ? torch::zeros({0, 2}, torch::kLong)
                                       : (torch::arange(comm.rank()) + 10 * comm.rank()).unsqueeze(1).repeat({1, 2});
    EXPECT_TRUE(ctx.allgather(rows, "rows").equal(torch::tensor({10, 10, 20, 20, 21, 21}, torch::kLong).view({3, 2})))
        << ctx.allgather(rows, "rows");
    EXPECT_TRUE(ctx.allgather(torch::tensor(r), "scalars").equal(torch::tensor({0.0, 1.0, 2.0}, torch::kDouble)));
  });
}

// The mismatch is found on every rank, named, and leaves the group usable.
TEST(HvdCollectives, MismatchedShapesFailOnEveryRankNamingTheTensor) {
  dpt::testing::run_ranks(2, [&](Communicator& comm) {
    hvd::Context ctx(borrow(comm));
    const auto mine = torch::ones({comm.rank() == 0 ? 3 : 4});
    EXPECT_EQ(error_of<dpt::ConfigError>([&] { ctx.allreduce(mine, "grad_norm"); }),
              dpt::str("rank ", comm.rank(), ": hvd::allreduce 'grad_norm': rank 0 and rank 1 disagree: rank 0 passes "
                       "'grad_norm' of shape [3] and dtype Float with op Average, rank 1 passes 'grad_norm' of shape "
                       "[4] and dtype Float with op Average. Every rank must allreduce a tensor of the same name, "
                       "shape and dtype with the same op, in the same order"));
    EXPECT_EQ(error_of<dpt::ConfigError>([&] { ctx.allgather(torch::ones({2, comm.rank() + 1}), "features"); }),
              dpt::str("rank ", comm.rank(), ": hvd::allgather 'features': rank 0 and rank 1 disagree: rank 0 passes "
                       "'features' of dtype Float with rows of shape [1], rank 1 passes 'features' of dtype Float with "
                       "rows of shape [2]. Every rank must allgather a tensor of the same name and dtype whose "
                       "dimensions after the first agree, in the same order"));
    EXPECT_EQ(error_of<dpt::ConfigError>([&] { ctx.broadcast(torch::ones({2}), 0, comm.rank() == 0 ? "weights" : "bias"); }),
              dpt::str("rank ", comm.rank(), ": hvd::broadcast '", comm.rank() == 0 ? "weights" : "bias",
                       "': rank 0 and rank 1 disagree: rank 0 passes 'weights' of shape [2] and dtype Float from rank "
                       "0, rank 1 passes 'bias' of shape [2] and dtype Float from rank 0. Every rank must broadcast a "
                       "tensor of the same name, shape and dtype from the same root, in the same order"));
    EXPECT_EQ(error_of<dpt::ConfigError>([&] { ctx.broadcast(torch::ones({2}), 2, "weights"); }),
              dpt::str("rank ", comm.rank(), ": hvd::broadcast 'weights': root_rank 2 is not a rank of this job (0..1)"));
    EXPECT_TRUE(ctx.allreduce(torch::ones({2}), "after", hvd::ReduceOp::Sum).equal(torch::full({2}, 2.0f)));
  });
}

TEST(HvdProcessContext, FreeFunctionsNeedInitAndFollowTheGuard) {
  ASSERT_FALSE(hvd::is_initialized());
  EXPECT_EQ(error_of<dpt::ConfigError>([] { hvd::rank(); }),
            "dpt::hvd::rank() was called before dpt::hvd::init() (or after dpt::hvd::shutdown()); call "
            "dpt::hvd::init() first, in a process started by dptrain launch, torchrun, srun or mpirun");
  dpt::testing::TempDir dir;
  {
    hvd::InitGuard guard(dpt::dist::InitOptions().init_method("file://" + dir.path() + "/rendezvous"));
    EXPECT_TRUE(hvd::is_initialized());
    EXPECT_EQ(hvd::rank(), 0);
    EXPECT_EQ(hvd::size(), 1);
    EXPECT_EQ(hvd::local_rank(), 0);
    EXPECT_EQ(hvd::local_size(), 1);
    EXPECT_TRUE(hvd::allreduce(torch::tensor({2.5}), "loss").equal(torch::tensor({2.5})));
    auto model = make_mlp();
    auto optimizer = std::make_shared<torch::optim::SGD>(model->parameters(), sgd());
    hvd::DistributedOptimizer distributed(optimizer, model->named_parameters());
    EXPECT_EQ(distributed.reducer().bucket_indices().size(), 1u);  // 64 MiB: one buffer
  }
  EXPECT_FALSE(hvd::is_initialized());
  EXPECT_EQ(error_of<dpt::ConfigError>([] { hvd::allreduce(torch::ones({1}), "x"); }).substr(0, 60),
            "dpt::hvd::allreduce() was called before dpt::hvd::init() (or");
}

// Two ranks started as mpirun or srun would start them (threads here), meeting through a file.
TEST(HvdProcessContext, ContextsFromOpenMpiAndSlurmEnvironments) {
  for (const std::string launcher : {"OpenMPI", "Slurm"}) {
    dpt::testing::TempDir dir;
    std::vector<std::string> seen(2);
    std::vector<std::thread> threads;
    for (int r = 0; r < 2; ++r) {
      threads.emplace_back([&, r] {
        const std::string rank = std::to_string(r);
        std::map<std::string, std::string> vars;
        if (launcher == "OpenMPI") {
          vars = {{"OMPI_COMM_WORLD_RANK", rank}, {"OMPI_COMM_WORLD_SIZE", "2"},
                  {"OMPI_COMM_WORLD_LOCAL_RANK", rank}, {"OMPI_COMM_WORLD_LOCAL_SIZE", "2"}};
        } else {
          vars = {{"SLURM_PROCID", rank}, {"SLURM_NTASKS", "2"}, {"SLURM_LOCALID", rank},
                  {"SLURM_NTASKS_PER_NODE", "2"}};
        }
        try {
          auto ctx = hvd::Context::create(dpt::dist::InitOptions()
                                              .init_method("file://" + dir.path() + "/rendezvous")
                                              .timeout(std::chrono::seconds(30)),
                                          dpt::Environment(vars));
          const double sum = ctx->allreduce(torch::tensor({r + 1.0}), "sum", hvd::ReduceOp::Sum).item<double>();
          seen[r] = dpt::str("rank ", ctx->rank(), "/", ctx->size(), ", local ", ctx->local_rank(), "/",
                             ctx->local_size(), ", sum ", sum);
        } catch (const std::exception& e) {
          seen[r] = e.what();
        }
      });
    }
    for (auto& t : threads) t.join();
    EXPECT_EQ(seen, (std::vector<std::string>{"rank 0/2, local 0/2, sum 3", "rank 1/2, local 1/2, sum 3"}))
        << launcher;
  }
}

}  // namespace
