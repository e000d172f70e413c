#pragma once
// A small MLP, seeded weights and batches, and the reference training loop that the
// data-parallel front ends (DistributedDataParallel, hvd::DistributedOptimizer) are compared with.
//
//   const auto data = dpt::testing::make_batches(/*steps=*/20, /*batch=*/8);
//   const auto expected = dpt::testing::train_reference(data, /*seed=*/100);
//   EXPECT_LE(dpt::testing::max_difference(trained, expected), 1e-5);

#include <algorithm>
#include <memory>
#include <vector>

#include <ATen/CPUGeneratorImpl.h>
#include <torch/torch.h>

#include "dptrain/dist/communicator.h"
#include "dptrain/parallel/ddp.h"

namespace dpt::testing {

// run_ranks owns the communicators; front ends take a shared handle.
inline std::shared_ptr<dist::Communicator> borrow(dist::Communicator& comm) { return {std::shared_ptr<void>(), &comm}; }

inline torch::nn::Sequential make_mlp(int64_t hidden = 8) {
  return torch::nn::Sequential(torch::nn::Linear(6, 16), torch::nn::ReLU(), torch::nn::Linear(16, hidden),
                               torch::nn::Tanh(), torch::nn::Linear(hidden, 3));
}

// Seeded from a private generator: the global one is shared by the rank threads.
inline void fill(torch::nn::Module& module, uint64_t seed) {
  auto gen = at::make_generator<at::CPUGeneratorImpl>(seed);
  torch::NoGradGuard no_grad;
  for (auto& p : module.parameters()) p.copy_(at::randn(p.sizes(), gen) * 0.5);
}

struct Batches {
  at::Tensor x;  // [steps, batch, 6]
  at::Tensor y;  // [steps, batch]
};

inline Batches make_batches(int64_t steps, int64_t batch) {
  auto gen = at::make_generator<at::CPUGeneratorImpl>(7);
  return {at::randn({steps, batch, 6}, gen), at::randint(3, {steps, batch}, gen, at::kLong)};
}

inline double max_difference(const std::vector<at::Tensor>& a, const std::vector<at::Tensor>& b) {
  double worst = 0;
  for (size_t i = 0; i < a.size(); ++i) worst = std::max(worst, (a[i] - b[i]).abs().max().item<double>());
  return worst;
}

inline torch::optim::SGDOptions sgd() { return torch::optim::SGDOptions(0.05).momentum(0.9).weight_decay(1e-3); }

// One process, the whole batch each step.
inline std::vector<at::Tensor> train_reference(const Batches& data, uint64_t seed) {
  auto model = make_mlp();
  fill(*model, seed);
  torch::optim::SGD optimizer(model->parameters(), sgd());
  for (int64_t s = 0; s < data.x.size(0); ++s) {
    optimizer.zero_grad();
    torch::nn::functional::cross_entropy(model->forward(data.x[s]), data.y[s]).backward();
    optimizer.step();
  }
  return model->parameters();
}

// Each rank its slice of every batch, through DistributedDataParallel with 104-byte buckets (three
// of them, several in flight), optionally with a comm hook. Rank r starts from seed + r: DDP must
// copy rank 0's weights.
inline std::vector<at::Tensor> train_ddp(dist::Communicator& comm, const Batches& data, uint64_t seed,
                                         const CommHook& hook = {}) {
  auto model = make_mlp();
  fill(*model, seed + comm.rank());
  DistributedDataParallel ddp(model, borrow(comm),
                              DDPOptions().reducer(
                                  ReducerOptions().first_bucket_cap_mb(0.0001).bucket_cap_mb(0.0001).last_bucket_cap_mb(
                                      0.0001)));
  if (hook) ddp.register_comm_hook(hook);
  torch::optim::SGD optimizer(ddp.parameters(), sgd());
  const int64_t per_rank = data.x.size(1) / comm.size();
  for (int64_t s = 0; s < data.x.size(0); ++s) {
    optimizer.zero_grad();
    auto x = data.x[s].narrow(0, comm.rank() * per_rank, per_rank);
    auto y = data.y[s].narrow(0, comm.rank() * per_rank, per_rank);
    torch::nn::functional::cross_entropy(ddp->forward(x), y).backward();
    optimizer.step();
  }
  return model->parameters();
}

}  // namespace dpt::testing
