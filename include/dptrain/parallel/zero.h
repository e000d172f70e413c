#pragma once
// ZeRO stage 1 (PyTorch's ZeroRedundancyOptimizer): each rank keeps the optimizer state of its
// shard of the parameters only and steps only that shard; the updated shards are then gathered
// into every rank's weights. Gradients are reduced as before (DistributedDataParallel averages
// them), so the weights after each step are those of one optimizer over every parameter, while a
// rank holds about 1/world of the state: AdamW's two moments are twice the weights, and in plain
// data parallelism every rank holds all of them.
//
//   dpt::DistributedDataParallel ddp(model, comm);
//   dpt::ZeroRedundancyOptimizer optimizer(comm, {torch::optim::OptimizerParamGroup(ddp->parameters())},
//       [](std::vector<torch::optim::OptimizerParamGroup> shard) {
//         return std::make_shared<torch::optim::AdamW>(std::move(shard), torch::optim::AdamWOptions(1e-3));
//       });
//   optimizer.zero_grad();
//   loss.backward();        // DDP averages the gradients
//   optimizer.step();       // this rank's shard steps, then every rank gathers the others'
//
// It is a ShardedOptimizer (sharded_optimizer.h), so a torch::optim::Optimizer over every
// parameter: what works on an optimizer's groups works on it: a schedule sets the lr of its groups
// (each step hands them to the shard's optimizer), a GradScaler unscales and steps it, zero_grad()
// clears every gradient. Its own state() stays empty: the state lives in local_optimizer(), whose
// parameters are whole ones, and the trainer's checkpoints gather it on one rank in the ordinary
// format (train/checkpoint/sharded_optimizer_state.h).
//
// The shards are balanced by size as PyTorch balances them (assign_shards).

#include <memory>
#include <string>
#include <vector>

#include "dptrain/dist/communicator.h"
#include "dptrain/parallel/sharded_optimizer.h"

namespace dpt {

// The rank that owns each parameter, by group, for parameters of `group_numels` elements: within
// each group the largest parameter first (ties in their order), each to the rank that owns the
// fewest elements so far over all groups (ties to the lowest rank).
std::vector<std::vector<int>> assign_shards(const std::vector<std::vector<int64_t>>& group_numels, int world_size);

class ZeroRedundancyOptimizer : public ShardedOptimizer {
 public:
  // `groups`: every trained parameter, in the groups an optimizer over all of them would take (a
  // group without options takes the local optimizer's defaults). The parameters must share one
  // dtype and device. Collective only in step().
  ZeroRedundancyOptimizer(std::shared_ptr<dist::Communicator> comm, std::vector<torch::optim::OptimizerParamGroup> groups,
                          const LocalOptimizerFactory& make_local);

  // Every rank holds the whole averaged gradient: clips it here, as clip_grad_norm_ over the
  // parameters does, without a collective, summing the norm in the order of the groups (which may
  // differ from a model's own order in the last bits).
  double clip_grad_norm(double max_norm) override;
  bool holds_whole_gradients() const override { return true; }
  std::string describe() const override { return "ZeRO-1: each process keeps its shard's state"; }

  // The rank that owns parameter `index` of group `group`.
  int owner(size_t group, size_t index) const { return owners_.at(group).at(index); }

 private:
  // `groups` by reference: the owners are worked out from them in the same call.
  ZeroRedundancyOptimizer(std::shared_ptr<dist::Communicator> comm, std::vector<std::vector<int>> owners,
                          std::vector<torch::optim::OptimizerParamGroup>&& groups,
                          const LocalOptimizerFactory& make_local);

  std::vector<std::vector<int>> owners_;
};

}  // namespace dpt
