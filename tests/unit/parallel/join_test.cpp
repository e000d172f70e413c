// Join with uneven shards: rank 0 trains 2 steps and rank 1 trains 4, through DDP on a model with
// SyncBatchNorm. Both must finish, hold the same final model, and that model must be what one
// process computes: steps 1-2 on both ranks' batches joined (BatchNorm over 8 images), steps 3-4
// on rank 1's batch alone with half its loss (DDP still averages over the world of 2, a finished
// rank counting as zero).
#include <gtest/gtest.h>

#include <mutex>

#include <torch/torch.h>

#include "dptrain/parallel/ddp.h"
#include "dptrain/parallel/join.h"
#include "dptrain/parallel/sync_batch_norm.h"
#include "support/thread_ranks.h"
#include "support/tiny_training.h"

namespace {

namespace F = torch::nn::functional;
using dpt::dist::Communicator;
using dpt::testing::borrow;

constexpr int64_t kPerRank = 4;
const std::vector<int64_t> kStepsOfRank = {2, 4};

// Conv, a norm layer from `norm`, pool and linear: the norm's collectives sit inside the forward.
torch::nn::Sequential make_model(const std::function<torch::nn::AnyModule()>& norm) {
  // The rank threads share the default generator: one model at a time, so each gets seed 3's weights.
  static std::mutex one_at_a_time;
  std::lock_guard<std::mutex> lock(one_at_a_time);
  torch::manual_seed(3);
  torch::nn::Sequential model(torch::nn::Conv2d(torch::nn::Conv2dOptions(3, 4, 3)), norm(), torch::nn::ReLU(),
                              torch::nn::AdaptiveAvgPool2d(1), torch::nn::Flatten(), torch::nn::Linear(4, 3));
  return model;
}

torch::nn::AnyModule plain_batch_norm() { return torch::nn::AnyModule(torch::nn::BatchNorm2d(4)); }

// The batch rank `rank` trains on at `step`.
std::pair<at::Tensor, at::Tensor> batch(int rank, int64_t step) {
  auto gen = at::detail::createCPUGenerator(static_cast<uint64_t>(100 * rank + step));
  auto x = at::randn({kPerRank, 3, 6, 6}, gen) * 2 + 1;
  auto y = at::randint(0, 3, {kPerRank}, gen);
  return {x, y};
}

std::vector<at::Tensor> state_of(torch::nn::Module& model) {
  std::vector<at::Tensor> state;
  for (const auto& p : model.parameters()) state.push_back(p.detach().clone());
  for (const auto& b : model.buffers()) state.push_back(b.detach().clone());
  return state;
}

std::vector<at::Tensor> train_reference() {
  auto model = make_model(plain_batch_norm);
  torch::optim::SGD optimizer(model->parameters(), torch::optim::SGDOptions(0.1).momentum(0.9));
  for (int64_t step = 0; step < kStepsOfRank[1]; ++step) {
    optimizer.zero_grad();
    at::Tensor loss;
    if (step < kStepsOfRank[0]) {
      auto [x0, y0] = batch(0, step);
      auto [x1, y1] = batch(1, step);
      loss = F::cross_entropy(model->forward(at::cat({x0, x1})), at::cat({y0, y1}));
    } else {
      auto [x1, y1] = batch(1, step);
      loss = F::cross_entropy(model->forward(x1), y1) / 2;
    }
    loss.backward();
    optimizer.step();
  }
  return state_of(*model);
}

}  // namespace

TEST(UnevenInputs, UnevenShardsThroughDdpAndSyncBatchNormFinishAsOneProcessWould) {
  const auto expected = train_reference();
  std::vector<std::vector<at::Tensor>> final_state(2);
  std::vector<int64_t> shadowed(2);
  dpt::testing::run_ranks(2, [&](Communicator& comm) {
    auto model = make_model([&] { return torch::nn::AnyModule(dpt::SyncBatchNorm(4, borrow(comm))); });
    dpt::DistributedDataParallel ddp(model, borrow(comm));
    torch::optim::SGD optimizer(ddp.parameters(), torch::optim::SGDOptions(0.1).momentum(0.9));
    dpt::Join join({&ddp});
    for (int64_t step = 0; step < kStepsOfRank[comm.rank()]; ++step) {
      auto [x, y] = batch(comm.rank(), step);
      optimizer.zero_grad();
      F::cross_entropy(ddp->forward(x), y).backward();
      optimizer.step();
    }
    shadowed[comm.rank()] = join.finish();
    final_state[comm.rank()] = state_of(*model);
  });
  EXPECT_EQ(shadowed, (std::vector<int64_t>{2, 0}));
  ASSERT_EQ(final_state[0].size(), expected.size());
  for (size_t i = 0; i < expected.size(); ++i) {
    EXPECT_TRUE(final_state[0][i].equal(final_state[1][i])) << "state " << i << " differs between the ranks";
    const double diff = (final_state[1][i].to(at::kDouble) - expected[i].to(at::kDouble)).abs().max().item<double>();
    EXPECT_LT(diff, 1e-5) << "state " << i;
  }
}

TEST(UnevenInputs, ARankWithoutASingleBatchCannotShadowAndSaysWhy) {
  std::string message;
  // Rank 0 throws; rank 1, left in its step's collective, times out.
  EXPECT_THROW(dpt::testing::run_ranks(
      2,
      [&](Communicator& comm) {
        auto model = make_model(plain_batch_norm);
        dpt::DistributedDataParallel ddp(model, borrow(comm));
        dpt::Join join({&ddp});
        if (comm.rank() == 1) {
          auto [x, y] = batch(1, 0);
          F::cross_entropy(ddp->forward(x), y).backward();
        }
        try {
          join.finish();
        } catch (const dpt::ConfigError& e) {
          message = e.what();
          throw;
        }
      },
      std::chrono::seconds(2)), std::runtime_error);
  EXPECT_NE(message.find("rank 0: this rank finished before its first training step"), std::string::npos) << message;
}
