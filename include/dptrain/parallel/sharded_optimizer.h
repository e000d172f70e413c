#pragma once
// What every sharded data-parallel optimizer is (ZeRO-1: zero.h, ZeRO-2: zero_stage2.h): a
// torch::optim::Optimizer over every trained parameter whose arithmetic each rank runs for its
// part of them only, through a local optimizer over those parts, after which every rank's updated
// parts are gathered into every rank's weights. The trainer, the checkpoints and the banner hold
// one of these and ask it what they need; none of them knows the stage.
//
//   std::shared_ptr<dpt::ShardedOptimizer> optimizer =
//       dpt::make_sharded_optimizer(/*stage=*/2, comm, groups, make_adamw, &ddp.reducer());
//   optimizer->zero_grad();
//   loss.backward();
//   optimizer->clip_grad_norm(1.0);    // collective: over the whole reduced gradient
//   optimizer->step();                 // collective: this rank's parts step, then every rank gathers
//   // checkpoints: dpt::train::consolidated_optimizer_state_dict(*optimizer, 0) (collective)
//
// Its own state() stays empty: the state lives in local_optimizer(), whose parameter k is the
// part local_parts()[k] of a whole parameter. That table is all a checkpoint needs to lay every
// rank's state out as one optimizer's, and to give each rank its parts of a whole one back.

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include <torch/optim/optimizer.h>

#include "dptrain/compat/compat.h"
#include "dptrain/dist/communicator.h"
#include "dptrain/parallel/reducer.h"

namespace dpt {

// Elements [offset, offset + length), in memory order, of parameter `index` (numbered across the
// groups in order, as a state dict numbers them). A whole parameter is {index, 0, its numel}.
struct ShardPart {
  int64_t index = 0;
  int64_t offset = 0;
  int64_t length = 0;
};

class ShardedOptimizer : public torch::optim::Optimizer {
 public:
  // Builds this rank's optimizer over its parts: the groups it is given mirror the sharded
  // optimizer's, in order, each with that group's options, holding only this rank's parts
  // (possibly none).
  using LocalOptimizerFactory =
      std::function<std::shared_ptr<torch::optim::Optimizer>(std::vector<torch::optim::OptimizerParamGroup>)>;

  ShardedOptimizer(const ShardedOptimizer&) = delete;
  ShardedOptimizer& operator=(const ShardedOptimizer&) = delete;

  // Collective: this rank's parts step with this optimizer's group options (the lr a schedule
  // set), then every rank's updated parts are gathered into every rank's weights. A closure is not
  // supported (each rank would evaluate the loss for its parts alone).
  at::Tensor step(LossClosure closure = nullptr) final;

  // Collective where the reduced gradients are spread over the ranks: scales them (every rank
  // alike) down to a total 2-norm of `max_norm` when above it, as torch.nn.utils.clip_grad_norm_
  // does over whole gradients; returns the total norm before clipping.
  virtual double clip_grad_norm(double max_norm) = 0;

  // torch::serialize archives would hold this rank's parts only, which no optimizer could load:
  // both throw ConfigError. Checkpoints gather the whole state instead.
  void save(torch::serialize::OutputArchive& archive) const final;
  void load(torch::serialize::InputArchive& archive) final;

  // The optimizer over this rank's parts. Its param groups mirror this one's: a schedule sets their lr.
  torch::optim::Optimizer& local_optimizer() { return *local_; }
  const torch::optim::Optimizer& local_optimizer() const { return *local_; }
  // What each of the local optimizer's parameters is (numbered across its groups in order).
  const std::vector<ShardPart>& local_parts() const { return local_parts_; }
  // Elements this rank steps.
  int64_t local_numel() const;
  dist::Communicator& communicator() const { return *comm_; }
  // Whether every rank holds the whole reduced gradient in the parameters' .grad (ZeRO-1), so that
  // what works on gradients (a GradScaler's unscaling) works as without sharding; false where each
  // holds its parts only (ZeRO-2).
  virtual bool holds_whole_gradients() const = 0;
  // For the banner: "ZeRO-2: each process keeps its shard's state and reduced gradients".
  virtual std::string describe() const = 0;

  // What a derived class's constructor works out before this base can be built (the base takes the local
  // optimizer's defaults, so the local optimizer comes first).
  struct Shard {
    // Checks `groups` (every parameter dense, one dtype and device: gathered as flat memory
    // through one buffer; ConfigError naming `kind` otherwise) and keeps their options.
    Shard(const dist::Communicator& comm, std::vector<torch::optim::OptimizerParamGroup> groups, const char* kind);
    // With the parts worked out: the local optimizer over `local_groups` (this rank's parts, by
    // group, each its own tensor over the weights' memory), made by `make_local`.
    void make_local_optimizer(std::vector<std::vector<at::Tensor>> local_groups,
                              const LocalOptimizerFactory& make_local);

    std::vector<torch::optim::OptimizerParamGroup> groups;
    compat::GroupOptions given;  // the groups' options, which the base's constructor may merge
    std::vector<ShardPart> local_parts;
    std::vector<std::vector<at::Tensor>> parts_by_rank;  // flat views of the weights, for the gather
    std::shared_ptr<torch::optim::Optimizer> local;
  };

 protected:
  ShardedOptimizer(std::shared_ptr<dist::Communicator> comm, Shard shard, const char* kind);

 private:
  std::shared_ptr<dist::Communicator> comm_;
  std::vector<ShardPart> local_parts_;
  std::vector<std::vector<at::Tensor>> parts_by_rank_;
  std::shared_ptr<torch::optim::Optimizer> local_;
  const char* kind_;
};

// The optimizer of ZeRO stage `stage` over `groups` (every trained parameter, in the groups one
// optimizer over them would take): 1 shards the optimizer state (ZeroRedundancyOptimizer), 2 also
// the reduced gradients (ZeroStage2Optimizer), cut from the buckets of `reducer`:
// DistributedDataParallel's, built with ReducerOptions::shard_gradients, over the same parameters,
// which must outlive the optimizer. ConfigError for another stage, or stage 2 without a reducer.
std::shared_ptr<ShardedOptimizer> make_sharded_optimizer(int stage, std::shared_ptr<dist::Communicator> comm,
                                                         std::vector<torch::optim::OptimizerParamGroup> groups,
                                                         const ShardedOptimizer::LocalOptimizerFactory& make_local,
                                                         const Reducer* reducer = nullptr);

}  // namespace dpt
