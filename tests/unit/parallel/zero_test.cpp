#include "dptrain/parallel/zero.h"
#include "dptrain/parallel/zero_stage2.h"

#include <gtest/gtest.h>

#include <cstdio>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include <torch/torch.h>

#include "dptrain/compat/compat.h"
#include "dptrain/parallel/sharded_optimizer.h"
#include "support/thread_ranks.h"
#include "support/tiny_training.h"

using dpt::DistributedDataParallel;
using dpt::ZeroRedundancyOptimizer;
using dpt::dist::Communicator;
using dpt::testing::Batches;
using dpt::testing::borrow;
using torch::optim::OptimizerParamGroup;

namespace {

using Factory = ZeroRedundancyOptimizer::LocalOptimizerFactory;

// An optimizer, and the options of its group of biases, which go without weight decay as the
// trainer groups them.
struct Recipe {
  std::string name;
  Factory make;
  std::function<std::unique_ptr<torch::optim::OptimizerOptions>()> bias_options;
};

std::vector<Recipe> recipes() {
  return {{"sgd",
           [](std::vector<OptimizerParamGroup> groups) {
             return dpt::compat::optimizer_over<torch::optim::SGD>(std::move(groups), dpt::testing::sgd());
           },
           [] { return std::make_unique<torch::optim::SGDOptions>(dpt::testing::sgd().weight_decay(0)); }},
          {"adamw",
           [](std::vector<OptimizerParamGroup> groups) {
             const auto defaults = torch::optim::AdamWOptions(0.01).weight_decay(0.05);
             return dpt::compat::optimizer_over<torch::optim::AdamW>(std::move(groups), defaults);
           },
           [] { return std::make_unique<torch::optim::AdamWOptions>(torch::optim::AdamWOptions(0.01).weight_decay(0)); }}};
}

std::vector<OptimizerParamGroup> weights_and_biases(const torch::nn::Module& model, const Recipe& recipe) {
  std::vector<at::Tensor> weights, biases;
  for (const auto& p : model.named_parameters()) {
    (p.key().find("bias") != std::string::npos ? biases : weights).push_back(p.value());
  }
  std::vector<OptimizerParamGroup> groups;
  groups.emplace_back(weights);
  groups.emplace_back(biases, recipe.bias_options());
  return groups;
}

struct Trained {
  std::vector<at::Tensor> weights;
  int64_t local_numel = 0;    // ZeRO only: elements of the parameters this rank steps
  size_t local_states = 0;    // parameters (ZeRO-2: parts) the local optimizer keeps state for
};

enum class Stage { Plain, Zero1, Zero2 };
// Before each step: no clipping; by the whole reduced gradient's norm (clip_grad_norm_ over the
// model's parameters, or the sharded optimizer's own); or, wrongly under ZeRO-2, each rank its
// parts by their own norm, the mistake a test of the right one must be able to tell apart.
enum class Clip { None, WholeNorm, EachRanksOwnNorm };
constexpr double kMaxNorm = 0.05;

// Each rank its slice of every batch through DistributedDataParallel, stepping with the recipe's
// optimizer over every parameter, or with ZeRO-1 or ZeRO-2 over it. Small buckets (closed past
// 60 floats: the MLP's 275 weights in a few), so that ZeRO-2's parts cut through parameters.
Trained train(Communicator& comm, const Batches& data, const Recipe& recipe, Stage stage, Clip clip = Clip::None) {
  auto model = dpt::testing::make_mlp();
  dpt::testing::fill(*model, 100);
  const double cap_mb = 240.0 / (1 << 20);
  DistributedDataParallel ddp(model, borrow(comm),
                              dpt::DDPOptions().reducer(dpt::ReducerOptions()
                                                            .bucket_cap_mb(cap_mb)
                                                            .first_bucket_cap_mb(cap_mb)
                                                            .last_bucket_cap_mb(cap_mb)
                                                            .shard_gradients(stage == Stage::Zero2)));
  std::shared_ptr<torch::optim::Optimizer> optimizer;
  std::shared_ptr<ZeroRedundancyOptimizer> zero1;
  std::shared_ptr<dpt::ZeroStage2Optimizer> zero2;
  switch (stage) {
    case Stage::Plain: optimizer = recipe.make(weights_and_biases(*model, recipe)); break;
    case Stage::Zero1:
      optimizer = zero1 =
          std::make_shared<ZeroRedundancyOptimizer>(borrow(comm), weights_and_biases(*model, recipe), recipe.make);
      break;
    case Stage::Zero2:
      optimizer = zero2 = std::make_shared<dpt::ZeroStage2Optimizer>(borrow(comm), ddp.reducer(),
                                                                     weights_and_biases(*model, recipe), recipe.make);
      break;
  }
  const int64_t per_rank = data.x.size(1) / comm.size();
  for (int64_t s = 0; s < data.x.size(0); ++s) {
    optimizer->zero_grad();
    auto x = data.x[s].narrow(0, comm.rank() * per_rank, per_rank);
    auto y = data.y[s].narrow(0, comm.rank() * per_rank, per_rank);
    torch::nn::functional::cross_entropy(ddp->forward(x), y).backward();
    if (zero2) {
      for (const auto& p : model->parameters()) EXPECT_FALSE(p.grad().defined()) << "ZeRO-2 left a whole gradient";
    }
    if (clip == Clip::WholeNorm && zero2) {
      zero2->clip_grad_norm(kMaxNorm);
    } else if (clip == Clip::WholeNorm) {
      torch::nn::utils::clip_grad_norm_(model->parameters(), kMaxNorm);
    } else if (clip == Clip::EachRanksOwnNorm) {
      std::vector<at::Tensor> parts;
      for (const auto& group : zero2->local_optimizer().param_groups()) {
        parts.insert(parts.end(), group.params().begin(), group.params().end());
      }
      torch::nn::utils::clip_grad_norm_(parts, kMaxNorm);
    }
    optimizer->step();
  }
  Trained trained;
  for (const auto& p : model->parameters()) trained.weights.push_back(p.detach().clone());
  if (zero1) {
    trained.local_states = zero1->local_optimizer().state().size();
    trained.local_numel = zero1->local_numel();
  } else if (zero2) {
    trained.local_states = zero2->local_optimizer().state().size();
    trained.local_numel = zero2->local_numel();
  } else {
    trained.local_states = optimizer->state().size();
  }
  return trained;
}

int64_t numel(const std::vector<at::Tensor>& tensors) {
  int64_t n = 0;
  for (const auto& t : tensors) n += t.numel();
  return n;
}

}  // namespace

TEST(AssignShards, LargestFirstToTheRankOwningTheFewestElements) {
  // 30 -> rank 0; 20 -> 1; 10 -> 1 (20 < 30); 5 -> 0 (a tie, 30 and 30: the lower rank). The
  // second group continues from those totals (35 and 30): 8 -> 1.
  EXPECT_EQ(dpt::assign_shards({{10, 30, 20, 5}, {8}}, 2), (std::vector<std::vector<int>>{{1, 0, 1, 0}, {1}}));
  // Equal sizes keep their order: round robin.
  EXPECT_EQ(dpt::assign_shards({{4, 4, 4, 4, 4}}, 3), (std::vector<std::vector<int>>{{0, 1, 2, 0, 1}}));
  EXPECT_EQ(dpt::assign_shards({{7, 1}}, 1), (std::vector<std::vector<int>>{{0, 0}}));
  EXPECT_EQ(dpt::assign_shards({{}, {3}}, 4), (std::vector<std::vector<int>>{{}, {0}}));
}

// ZeRO changes where the optimizer's arithmetic runs, not what it computes: with the gradients
// DDP averaged, each parameter's update is the same elementwise arithmetic on the same numbers, so
// the weights must equal plain DDP's bit for bit, for SGD with momentum and for AdamW, with two
// groups of their own options, on 2 and 3 ranks.
TEST(ZeroRedundancyOptimizer, EqualsDdpBitForBitWhileEachRankKeepsItsShardsStateOnly) {
  for (int world : {2, 3}) {
    for (const Recipe& recipe : recipes()) {
      SCOPED_TRACE(recipe.name + " on " + std::to_string(world) + " ranks");
      const Batches data = dpt::testing::make_batches(/*steps=*/12, /*batch=*/12);
      std::vector<int64_t> owned(world, 0);
      std::vector<size_t> states(world, 0);
      int64_t total = 0;
      dpt::testing::run_ranks(world, [&](Communicator& comm) {
        const Trained plain = train(comm, data, recipe, Stage::Plain);
        const Trained sharded = train(comm, data, recipe, Stage::Zero1);
        EXPECT_EQ(dpt::testing::max_difference(sharded.weights, plain.weights), 0.0) << "rank " << comm.rank();
        owned[comm.rank()] = sharded.local_numel;
        states[comm.rank()] = sharded.local_states;
        if (comm.rank() == 0) {
          total = numel(plain.weights);
          EXPECT_EQ(plain.local_states, plain.weights.size());
        }
      });
      int64_t sum = 0;
      size_t state_sum = 0;
      for (int r = 0; r < world; ++r) {
        EXPECT_GT(owned[r], 0);
        EXPECT_LT(owned[r], total);
        sum += owned[r];
        state_sum += states[r];
      }
      EXPECT_EQ(sum, total) << "every parameter in exactly one shard";
      EXPECT_EQ(state_sum, 6u) << "the model's 6 parameters' state, each on one rank";
    }
  }
}

// ZeRO-2: the reducer reduce-scatters each bucket, every rank steps its part of each bucket (parts
// cut through parameters), and the parts are gathered back: the same elementwise arithmetic on the
// same averaged gradients, so the weights equal plain DDP's bit for bit, while a rank keeps state
// for about 1/world of the elements and never a whole gradient.
TEST(ZeroStage2Optimizer, EqualsDdpBitForBitWhileEachRankKeepsItsPartsOnly) {
  for (int world : {2, 3}) {
    for (const Recipe& recipe : recipes()) {
      SCOPED_TRACE(recipe.name + " on " + std::to_string(world) + " ranks");
      const Batches data = dpt::testing::make_batches(/*steps=*/12, /*batch=*/12);
      std::vector<int64_t> stepped(world, 0);
      std::vector<size_t> parts(world, 0);
      int64_t total = 0;
      dpt::testing::run_ranks(world, [&](Communicator& comm) {
        const Trained plain = train(comm, data, recipe, Stage::Plain);
        const Trained sharded = train(comm, data, recipe, Stage::Zero2);
        EXPECT_EQ(dpt::testing::max_difference(sharded.weights, plain.weights), 0.0) << "rank " << comm.rank();
        stepped[comm.rank()] = sharded.local_numel;
        parts[comm.rank()] = sharded.local_states;
        if (comm.rank() == 0) total = numel(plain.weights);
      });
      int64_t sum = 0;
      for (int r = 0; r < world; ++r) {
        // Each bucket is split evenly (its padding to a multiple of the world in the last part).
        EXPECT_NEAR(static_cast<double>(stepped[r]), static_cast<double>(total) / world, 12.0) << "rank " << r;
        EXPECT_GT(parts[r], 0u);
        sum += stepped[r];
      }
      EXPECT_EQ(sum, total) << "every element in exactly one part";
    }
  }
}

// Under ZeRO-2 no rank holds a whole gradient, so clipping sums the squares of each rank's parts
// and then over the ranks: the norm of the whole gradient, in another order than clip_grad_norm_
// over the parameters, so the weights stay within rounding of plain DDP's, clipped the same.
// The bound is the one test_train_zero.py holds the trainer to; each rank clipping its parts by
// their own norm, and not clipping at all, must land outside it.
TEST(ZeroStage2Optimizer, ClipsByTheNormOfTheWholeGradient) {
  constexpr double kBound = 1e-4;
  const Recipe recipe = recipes().back();  // AdamW: its update follows the gradient's scale
  const Batches data = dpt::testing::make_batches(/*steps=*/12, /*batch=*/12);
  std::vector<double> right(2), own_norm(2), unclipped(2);
  dpt::testing::run_ranks(2, [&](Communicator& comm) {
    const Trained plain = train(comm, data, recipe, Stage::Plain, Clip::WholeNorm);
    const int r = comm.rank();
    right[r] = dpt::testing::max_difference(train(comm, data, recipe, Stage::Zero2, Clip::WholeNorm).weights,
                                            plain.weights);
    own_norm[r] = dpt::testing::max_difference(
        train(comm, data, recipe, Stage::Zero2, Clip::EachRanksOwnNorm).weights, plain.weights);
    unclipped[r] = dpt::testing::max_difference(train(comm, data, recipe, Stage::Plain).weights, plain.weights);
  });
  std::printf("[ figures  ] ZeRO-2 clipped to %g, 12 AdamW steps, 2 ranks: max |delta| from DDP clipped alike %.2e "
              "(each rank by its own parts' norm %.2e, unclipped %.2e)\n",
              kMaxNorm, right[0], own_norm[0], unclipped[0]);
  for (int r = 0; r < 2; ++r) {
    EXPECT_LE(right[r], kBound) << "rank " << r;
    EXPECT_GT(own_norm[r], kBound) << "rank " << r << ": the wrong norm lands inside the bound";
    EXPECT_GT(unclipped[r], kBound) << "rank " << r << ": clipping changed nothing";
  }
}

TEST(ZeroStage2Optimizer, NeedsAReducerThatShardsGradients) {
  dpt::testing::run_ranks(2, [&](Communicator& comm) {
    auto model = dpt::testing::make_mlp();
    DistributedDataParallel ddp(model, borrow(comm));
    const Recipe recipe = recipes().front();
    try {
      dpt::ZeroStage2Optimizer optimizer(borrow(comm), ddp.reducer(), weights_and_biases(*model, recipe), recipe.make);
      ADD_FAILURE() << "built over a reducer that all-reduces";
    } catch (const dpt::ConfigError& e) {
      EXPECT_NE(std::string(e.what()).find("needs a reducer built with ReducerOptions::shard_gradients"),
                std::string::npos)
          << e.what();
    }
  });
}

// Both stages behind the one interface the trainer and the checkpoints hold: each rank's table of
// parts covers every element of every parameter exactly once over the ranks (ZeRO-1's parts whole
// parameters, ZeRO-2's cut through them), the local optimizer has one parameter a part, and what
// each says of its gradients and of itself.
TEST(ShardedOptimizer, EveryElementIsInExactlyOneRanksPartsAtEitherStage) {
  const Recipe recipe = recipes().back();
  for (const int stage : {1, 2}) {
    SCOPED_TRACE("stage " + std::to_string(stage));
    std::vector<std::vector<dpt::ShardPart>> parts(2);
    std::vector<int64_t> numels;
    dpt::testing::run_ranks(2, [&](Communicator& comm) {
      auto model = dpt::testing::make_mlp();
      const double cap_mb = 240.0 / (1 << 20);  // small buckets, so that ZeRO-2's parts cut parameters
      DistributedDataParallel ddp(model, borrow(comm),
                                  dpt::DDPOptions().reducer(dpt::ReducerOptions()
                                                                .bucket_cap_mb(cap_mb)
                                                                .first_bucket_cap_mb(cap_mb)
                                                                .last_bucket_cap_mb(cap_mb)
                                                                .shard_gradients(stage == 2)));
      const auto sharded = dpt::make_sharded_optimizer(stage, borrow(comm), weights_and_biases(*model, recipe),
                                                       recipe.make, &ddp.reducer());
      EXPECT_EQ(sharded->holds_whole_gradients(), stage == 1);
      EXPECT_EQ(sharded->describe().rfind("ZeRO-" + std::to_string(stage) + ": ", 0), 0u) << sharded->describe();
      size_t local_parameters = 0;
      for (const auto& group : sharded->local_optimizer().param_groups()) local_parameters += group.params().size();
      EXPECT_EQ(local_parameters, sharded->local_parts().size());
      int64_t local = 0;
      for (const auto& part : sharded->local_parts()) local += part.length;
      EXPECT_EQ(local, sharded->local_numel());
      parts[comm.rank()] = sharded->local_parts();
      if (comm.rank() == 0) {
        for (const auto& group : sharded->param_groups()) {
          for (const auto& p : group.params()) numels.push_back(p.numel());
        }
      }
    });
    std::vector<std::vector<int>> covered;
    for (const int64_t n : numels) covered.emplace_back(static_cast<size_t>(n), 0);
    bool cut = false;
    for (const auto& rank_parts : parts) {
      for (const auto& part : rank_parts) {
        const int64_t n = numels.at(static_cast<size_t>(part.index));
        ASSERT_LE(part.offset + part.length, n);
        cut = cut || part.length < n;
        if (stage == 1) {
          EXPECT_EQ(part.offset, 0);
        }
        for (int64_t e = part.offset; e < part.offset + part.length; ++e) ++covered[part.index][e];
      }
    }
    for (const auto& elements : covered) {
      for (const int times : elements) ASSERT_EQ(times, 1);
    }
    EXPECT_EQ(cut, stage == 2) << "ZeRO-1 keeps parameters whole; these buckets cut some under ZeRO-2";
  }
}

TEST(ShardedOptimizer, OnlyStagesOneAndTwoAndTwoNeedsItsReducer) {
  dpt::testing::run_ranks(2, [&](Communicator& comm) {
    auto model = dpt::testing::make_mlp();
    const Recipe recipe = recipes().front();
    EXPECT_THROW(dpt::make_sharded_optimizer(3, borrow(comm), weights_and_biases(*model, recipe), recipe.make),
                 dpt::ConfigError);
    try {
      dpt::make_sharded_optimizer(2, borrow(comm), weights_and_biases(*model, recipe), recipe.make);
      ADD_FAILURE() << "stage 2 built without a reducer";
    } catch (const dpt::ConfigError& e) {
      EXPECT_NE(std::string(e.what()).find("ZeRO-2 steps the parts of the gradients a reducer keeps"), std::string::npos)
          << e.what();
    }
  });
}
