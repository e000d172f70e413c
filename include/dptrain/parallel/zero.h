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
// It is a torch::optim::Optimizer over every parameter, so what works on an optimizer's groups
// works on it: a schedule sets the lr of its groups (each step hands them to the shard's
// optimizer), a GradScaler unscales and steps it, zero_grad() clears every gradient. Its own
// state() stays empty: the state lives in local_optimizer(), and the trainer's checkpoints gather
// it on one rank in the ordinary format (train/checkpoint/optimizer_state.h).
//
// The shards are balanced by size as PyTorch balances them (assign_shards).

#include <functional>
#include <memory>
#include <vector>

#include <torch/optim/optimizer.h>

#include "dptrain/dist/communicator.h"

namespace dpt {

// The rank that owns each parameter, by group, for parameters of `group_numels` elements: within
// each group the largest parameter first (ties in their order), each to the rank that owns the
// fewest elements so far over all groups (ties to the lowest rank).
std::vector<std::vector<int>> assign_shards(const std::vector<std::vector<int64_t>>& group_numels, int world_size);

class ZeroRedundancyOptimizer : public torch::optim::Optimizer {
 public:
  // Builds this rank's optimizer over its shard: the groups it is given mirror the ones passed to
  // the constructor, in order, each with that group's options, holding only the parameters this
  // rank owns (possibly none).
  using LocalOptimizerFactory =
      std::function<std::shared_ptr<torch::optim::Optimizer>(std::vector<torch::optim::OptimizerParamGroup>)>;

  // `groups`: every trained parameter, in the groups an optimizer over all of them would take (a
  // group without options takes the local optimizer's defaults). The parameters must share one
  // dtype and device. Collective only in step().
  ZeroRedundancyOptimizer(std::shared_ptr<dist::Communicator> comm, std::vector<torch::optim::OptimizerParamGroup> groups,
                          const LocalOptimizerFactory& make_local);
  ZeroRedundancyOptimizer(const ZeroRedundancyOptimizer&) = delete;
  ZeroRedundancyOptimizer& operator=(const ZeroRedundancyOptimizer&) = delete;

  // Collective: this rank's optimizer steps its shard with this optimizer's group options (the lr
  // a schedule set), then all_gathers bring every rank the updated parameters of the others.
  // A closure is not supported (each rank would evaluate the loss for its shard alone).
  at::Tensor step(LossClosure closure = nullptr) override;

  // torch::serialize archives would hold this rank's shard only, which no optimizer could load:
  // both throw ConfigError. Checkpoints gather the whole state instead.
  void save(torch::serialize::OutputArchive& archive) const override;
  void load(torch::serialize::InputArchive& archive) override;

  // This rank's optimizer. Its param groups mirror the given ones: a schedule sets their lr.
  torch::optim::Optimizer& local_optimizer() { return *local_; }
  const torch::optim::Optimizer& local_optimizer() const { return *local_; }
  // The rank that owns parameter `index` of group `group`.
  int owner(size_t group, size_t index) const { return owners_.at(group).at(index); }
  // Elements of the parameters this rank owns.
  int64_t local_numel() const { return shard_numel_.at(comm_->rank()); }
  dist::Communicator& communicator() const { return *comm_; }

 private:
  struct Sharding;
  explicit ZeroRedundancyOptimizer(Sharding sharding);
  // Every rank's updated parameters to every other rank.
  void gather_shards();

  std::shared_ptr<dist::Communicator> comm_;
  std::vector<std::vector<int>> owners_;
  std::vector<int64_t> shard_numel_;             // by rank
  std::shared_ptr<torch::optim::Optimizer> local_;
};

}  // namespace dpt
