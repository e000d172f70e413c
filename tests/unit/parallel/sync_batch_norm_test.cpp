// SyncBatchNorm against its oracle: torch::nn::BatchNorm2d applied to the batches of all ranks
// joined into one. Each rank's output and input gradient must equal its slice of the joined
// result, the weight and bias gradients summed over ranks the joined ones, and every rank's
// running statistics the joined ones.
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdio>
#include <mutex>
#include <numeric>
#include <vector>

#include <torch/torch.h>

#include "dptrain/parallel/sync_batch_norm.h"
#include "support/thread_ranks.h"
#include "support/tiny_training.h"

namespace {

using dpt::SyncBatchNorm;
using dpt::SyncBatchNormOptions;
using dpt::dist::Communicator;
using torch::Tensor;

// run_ranks owns the communicators; the layer takes a shared handle.
using dpt::testing::borrow;

double max_abs_diff(const Tensor& a, const Tensor& b) {
  if (a.numel() == 0) return 0;
  return (a.to(torch::kCPU, torch::kDouble) - b.to(torch::kCPU, torch::kDouble)).abs().max().item<double>();
}

constexpr int64_t kChannels = 3;
constexpr int kSteps = 2;  // two updates of the running statistics

// What BatchNorm2d computes on the joined batch, step by step.
struct Joined {
  std::vector<Tensor> inputs, grad_outputs;            // per step: [sum of sizes, C, H, W]
  std::vector<Tensor> outputs, grad_inputs;            // per step
  std::vector<Tensor> grad_weights, grad_biases;       // per step
  Tensor running_mean, running_var, num_batches_tracked;  // after the last step
  Tensor weight, bias;                                 // the initial affine parameters
};

// Inputs with a large mean relative to their spread (3 +- 2), as activations often are.
Joined joined_reference(int64_t total, const SyncBatchNormOptions& options) {
  torch::manual_seed(7);
  Joined j;
  torch::nn::BatchNorm2d bn(options);
  if (options.affine()) {
    torch::NoGradGuard no_grad;
    bn->weight.copy_(torch::rand({kChannels}) + 0.5);
    bn->bias.copy_(torch::randn({kChannels}));
    j.weight = bn->weight.detach().clone();
    j.bias = bn->bias.detach().clone();
  }
  for (int step = 0; step < kSteps; ++step) {
    auto x = (torch::randn({total, kChannels, 5, 4}) * 2 + 3).requires_grad_();
    auto g = torch::randn({total, kChannels, 5, 4});
    auto y = bn(x);
    if (bn->weight.defined()) {
      bn->weight.mutable_grad() = Tensor();
      bn->bias.mutable_grad() = Tensor();
    }
    (y * g).sum().backward();
    j.inputs.push_back(x.detach());
    j.grad_outputs.push_back(g);
    j.outputs.push_back(y.detach());
    j.grad_inputs.push_back(x.grad());
    j.grad_weights.push_back(bn->weight.defined() ? bn->weight.grad().clone() : Tensor());
    j.grad_biases.push_back(bn->bias.defined() ? bn->bias.grad().clone() : Tensor());
  }
  j.running_mean = bn->running_mean;
  j.running_var = bn->running_var;
  j.num_batches_tracked = bn->num_batches_tracked;
  return j;
}

// The largest differences any rank saw, by quantity.
struct Deltas {
  double output = 0, grad_input = 0, grad_affine = 0, running = 0;
  std::mutex mutex;
  void merge(double o, double gi, double ga, double r) {
    std::lock_guard<std::mutex> lock(mutex);
    output = std::max(output, o);
    grad_input = std::max(grad_input, gi);
    grad_affine = std::max(grad_affine, ga);
    running = std::max(running, r);
  }
};

// Runs SyncBatchNorm on len(sizes) ranks, rank r holding sizes[r] samples of each step's joined
// batch, and compares everything with the joined BatchNorm2d.
// `rank0_device`: rank 0's, the other ranks' being the CPU.
void expect_matches_joined_batch(const std::vector<int64_t>& sizes, const SyncBatchNormOptions& options,
                                 const char* label, torch::Device rank0_device = torch::kCPU) {
  const int64_t total = std::accumulate(sizes.begin(), sizes.end(), int64_t{0});
  const Joined j = joined_reference(total, options);
  Deltas deltas;
  dpt::testing::run_ranks(static_cast<int>(sizes.size()), [&](Communicator& comm) {
    const int64_t begin = std::accumulate(sizes.begin(), sizes.begin() + comm.rank(), int64_t{0});
    const int64_t end = begin + sizes[comm.rank()];
    const torch::Device device = comm.rank() == 0 ? rank0_device : torch::Device(torch::kCPU);
    SyncBatchNorm bn(options, borrow(comm));
    if (options.affine()) {
      torch::NoGradGuard no_grad;
      bn->weight.copy_(j.weight);
      bn->bias.copy_(j.bias);
    }
    bn->to(device);
    double d_out = 0, d_grad_in = 0, d_grad_affine = 0;
    for (int step = 0; step < kSteps; ++step) {
      auto x = j.inputs[step].slice(0, begin, end).clone().to(device).requires_grad_();
      auto y = bn(x);
      if (bn->weight.defined()) {
        bn->weight.mutable_grad() = Tensor();
        bn->bias.mutable_grad() = Tensor();
      }
      (y * j.grad_outputs[step].slice(0, begin, end).to(device)).sum().backward();
      d_out = std::max(d_out, max_abs_diff(y, j.outputs[step].slice(0, begin, end)));
      d_grad_in = std::max(d_grad_in, max_abs_diff(x.grad(), j.grad_inputs[step].slice(0, begin, end)));
      if (options.affine()) {
        // Each rank holds its own share; their sum is the joined gradient (DDP averages them).
        auto grads = torch::cat({bn->weight.grad(), bn->bias.grad()}).cpu();
        comm.all_reduce(grads);
        d_grad_affine = std::max(
            d_grad_affine, max_abs_diff(grads, torch::cat({j.grad_weights[step], j.grad_biases[step]})));
      }
    }
    double d_running = 0;
    if (options.track_running_stats()) {
      d_running = std::max(max_abs_diff(bn->running_mean, j.running_mean),
                           max_abs_diff(bn->running_var, j.running_var));
      EXPECT_EQ(bn->num_batches_tracked.item<int64_t>(), j.num_batches_tracked.item<int64_t>());
    }
    deltas.merge(d_out, d_grad_in, d_grad_affine, d_running);
  });
  std::printf("[ figures  ] %s: max |delta| output %.2e, input grad %.2e, weight/bias grad %.2e, running stats %.2e\n",
              label, deltas.output, deltas.grad_input, deltas.grad_affine, deltas.running);
  EXPECT_LE(deltas.output, 1e-5);
  EXPECT_LE(deltas.grad_input, 1e-5);
  EXPECT_LE(deltas.grad_affine, 1e-5);
  EXPECT_LE(deltas.running, 1e-5);
}

TEST(SyncBatchNorm, TwoRanksEqualBatchNormOnTheJoinedBatch) {
  expect_matches_joined_batch({4, 4}, SyncBatchNormOptions(kChannels), "2 ranks x 4");
}

TEST(SyncBatchNorm, ThreeRanksWithUnequalBatchesEqualBatchNormOnTheJoinedBatch) {
  expect_matches_joined_batch({1, 5, 2}, SyncBatchNormOptions(kChannels), "3 ranks x (1, 5, 2)");
}

TEST(SyncBatchNorm, ARankWithAnEmptyBatchStillTakesPart) {
  expect_matches_joined_batch({0, 3}, SyncBatchNormOptions(kChannels), "2 ranks x (0, 3)");
}

TEST(SyncBatchNorm, CumulativeAverageWithoutAffineEqualsBatchNorm) {
  expect_matches_joined_batch({2, 3}, SyncBatchNormOptions(kChannels).momentum(c10::nullopt).affine(false),
                              "momentum None, affine off");
}

TEST(SyncBatchNorm, WithoutRunningStatsEqualsBatchNorm) {
  expect_matches_joined_batch({3, 2}, SyncBatchNormOptions(kChannels).track_running_stats(false),
                              "track_running_stats off");
}

// CUDA tensors with a Gloo group: the statistics travel through the communicator's device (CPU).
// Rank 0 on the GPU, rank 1 on the CPU: autograd runs a GPU's backward on that device's one
// engine thread, shared by every thread of the process, so two thread ranks on one GPU would
// wait for each other's backward all-reduce there forever (separate processes each have theirs).
TEST(SyncBatchNorm, TwoRanksOnCudaTensors_CUDA) {
  if (!torch::cuda::is_available()) GTEST_SKIP() << "no CUDA device";
  expect_matches_joined_batch({3, 5}, SyncBatchNormOptions(kChannels), "CUDA and CPU, 2 ranks x (3, 5)",
                              torch::Device(torch::kCUDA, 0));
}

// Same state, same input: eval mode must be BatchNorm2d's computation, with no communication at
// all (only rank 0 runs it; a collective would wait for rank 1 until the timeout).
TEST(SyncBatchNorm, EvalModeIsBatchNorm2dAndDoesNotCommunicate) {
  torch::manual_seed(3);
  torch::nn::BatchNorm2d reference(kChannels);
  {
    torch::NoGradGuard no_grad;
    reference->weight.copy_(torch::rand({kChannels}) + 0.5);
    reference->bias.copy_(torch::randn({kChannels}));
    reference->running_mean.copy_(torch::randn({kChannels}));
    reference->running_var.copy_(torch::rand({kChannels}) + 0.1);
  }
  reference->eval();
  const auto x = torch::randn({2, kChannels, 4, 4});
  const auto expected = reference(x);
  dpt::testing::run_ranks(2, [&](Communicator& comm) {
    if (comm.rank() != 0) return;
    SyncBatchNorm bn(kChannels, borrow(comm));
    torch::NoGradGuard no_grad;
    for (const auto& p : reference->named_parameters()) bn->named_parameters()[p.key()].copy_(p.value());
    for (const auto& b : reference->named_buffers()) bn->named_buffers()[b.key()].copy_(b.value());
    bn->eval();
    EXPECT_TRUE(torch::equal(bn(x), expected));
    EXPECT_EQ(bn->num_batches_tracked.item<int64_t>(), 0);
  });
}

// A world of one rank in training: bitwise BatchNorm2d (outputs, gradients, running stats).
TEST(SyncBatchNorm, OneRankIsBatchNorm2dBitwise) {
  torch::manual_seed(5);
  const auto x = torch::randn({4, kChannels, 3, 3});
  const auto g = torch::randn({4, kChannels, 3, 3});
  torch::nn::BatchNorm2d reference(kChannels);
  auto xr = x.clone().requires_grad_();
  (reference(xr) * g).sum().backward();
  dpt::testing::run_ranks(1, [&](Communicator& comm) {
    SyncBatchNorm bn(kChannels, borrow(comm));
    auto xs = x.clone().requires_grad_();
    auto y = bn(xs);
    (y * g).sum().backward();
    EXPECT_TRUE(torch::equal(xs.grad(), xr.grad()));
    EXPECT_TRUE(torch::equal(bn->weight.grad(), reference->weight.grad()));
    EXPECT_TRUE(torch::equal(bn->bias.grad(), reference->bias.grad()));
    EXPECT_TRUE(torch::equal(bn->running_mean, reference->running_mean));
    EXPECT_TRUE(torch::equal(bn->running_var, reference->running_var));
  });
}

TEST(SyncBatchNorm, HasBatchNorm2dsStateDictNames) {
  SyncBatchNorm bn(8, nullptr);
  std::vector<std::string> names;
  for (const auto& p : bn->named_parameters()) names.push_back(p.key());
  for (const auto& b : bn->named_buffers()) names.push_back(b.key());
  EXPECT_EQ(names, (std::vector<std::string>{"weight", "bias", "running_mean", "running_var",
                                             "num_batches_tracked"}));
  std::ostringstream text;
  text << *bn;
  EXPECT_EQ(text.str(), "dpt::SyncBatchNorm(8, eps=1e-05, momentum=0.1, affine=true, track_running_stats=true, "
                        "world_size=1)");
}

TEST(SyncBatchNorm, ForwardsOutOfStepFailOnEveryRank) {
  std::vector<std::string> errors(2);
  EXPECT_THROW(dpt::testing::run_ranks(2,
                                       [&](Communicator& comm) {
                                         SyncBatchNorm a(kChannels, borrow(comm)), b(kChannels, borrow(comm));
                                         const auto x = torch::randn({2, kChannels, 2, 2});
                                         a(x);
                                         try {
                                           // Rank 0 runs layer a again where rank 1 runs layer b.
                                           comm.rank() == 0 ? a(x) : b(x);
                                         } catch (const dpt::DistError& e) {
                                           errors[comm.rank()] = e.what();
                                           throw;
                                         }
                                       }),
               std::runtime_error);
  EXPECT_EQ(errors[0],
            "rank 0: SyncBatchNorm forward out of step: this rank is at synchronised call 1 of this layer, rank 1 "
            "at call 0. In training mode every rank must run forward and backward of each SyncBatchNorm layer "
            "the same number of times, in the same order");
  EXPECT_NE(errors[1].find("rank 1: SyncBatchNorm forward out of step: this rank is at synchronised call 0"),
            std::string::npos)
      << errors[1];
}

TEST(SyncBatchNorm, OneValuePerChannelOverAllRanksIsRejectedOnEveryRank) {
  std::vector<std::string> errors(2);
  EXPECT_THROW(dpt::testing::run_ranks(2,
                                       [&](Communicator& comm) {
                                         SyncBatchNorm bn(kChannels, borrow(comm));
                                         try {
                                           bn(torch::randn({comm.rank() == 0 ? 1 : 0, kChannels}));
                                         } catch (const dpt::ConfigError& e) {
                                           errors[comm.rank()] = e.what();
                                           throw;
                                         }
                                       }),
               std::runtime_error);
  EXPECT_EQ(errors[0], "rank 0: SyncBatchNorm in training mode needs more than one value per channel over all "
                       "ranks, got 1 (this rank's input has shape [1, 3])");
  EXPECT_EQ(errors[1], "rank 1: SyncBatchNorm in training mode needs more than one value per channel over all "
                       "ranks, got 1 (this rank's input has shape [0, 3])");
}

TEST(SyncBatchNorm, WrongChannelCountIsAConfigError) {
  SyncBatchNorm bn(4, nullptr);
  try {
    bn(torch::randn({2, 3, 2, 2}));
    FAIL() << "no error";
  } catch (const dpt::ConfigError& e) {
    EXPECT_STREQ(e.what(), "SyncBatchNorm(4) expects input of shape [N, 4, ...], got [2, 3, 2, 2]");
  }
}

// Under bfloat16 inputs (CPU autocast) the statistics are float32 and the output keeps the
// input's type; the result stays within bfloat16 rounding of the float32 computation.
TEST(SyncBatchNorm, Bfloat16InputsUseFloat32Statistics) {
  torch::manual_seed(11);
  const auto x = torch::randn({6, kChannels, 4, 4}) * 2 + 3;
  torch::nn::BatchNorm2d reference(kChannels);
  const auto expected = reference(x);
  dpt::testing::run_ranks(2, [&](Communicator& comm) {
    SyncBatchNorm bn(kChannels, borrow(comm));
    auto xs = x.slice(0, 3 * comm.rank(), 3 * comm.rank() + 3).to(torch::kBFloat16).requires_grad_();
    auto y = bn(xs);
    EXPECT_EQ(y.scalar_type(), torch::kBFloat16);
    EXPECT_LE(max_abs_diff(y, expected.slice(0, 3 * comm.rank(), 3 * comm.rank() + 3)), 0.05);
    y.sum().backward();
    EXPECT_EQ(xs.grad().scalar_type(), torch::kBFloat16);
    EXPECT_EQ(bn->weight.grad().scalar_type(), torch::kFloat);
  });
}

}  // namespace
