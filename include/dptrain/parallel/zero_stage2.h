#pragma once
// ZeRO stage 2: the optimizer state and the reduced gradients both kept per shard. The reducer of
// DistributedDataParallel reduce-scatters each gradient bucket as backward fills it
// (ReducerOptions::shard_gradients), so a rank ends backward holding the averaged gradient of its
// 1/world of every bucket and nothing else; this optimizer steps exactly those elements (parts of
// parameters, views of their memory) with their state only, then gathers every rank's updated
// parts into every rank's weights. The arithmetic per element is the optimizer's own, on the same
// averaged gradients, so the weights are those of plain DDP with one optimizer over every
// parameter (SGD, AdamW, RMSprop: elementwise updates).
//
//   dpt::DistributedDataParallel ddp(model, comm, dpt::DDPOptions().reducer(
//       dpt::ReducerOptions().shard_gradients(true)));
//   dpt::ZeroStage2Optimizer optimizer(comm, ddp.reducer(), groups, make_adamw);
//   optimizer.zero_grad();
//   loss.backward();        // buckets reduce-scattered: this rank's parts only
//   optimizer.step();       // its parts step, then every rank gathers the others'
//
// Like ZeroRedundancyOptimizer it is a torch::optim::Optimizer over every parameter (a schedule
// sets its groups' lr), whose own state() stays empty. The parameters' .grad are unset after a
// reducing backward: clip with clip_grad_norm() here, not over the parameters.

#include <cstdint>
#include <memory>
#include <vector>

#include <torch/optim/optimizer.h>

#include "dptrain/dist/communicator.h"
#include "dptrain/parallel/reducer.h"
#include "dptrain/parallel/zero.h"

namespace dpt {

class ZeroStage2Optimizer : public torch::optim::Optimizer {
 public:
  using LocalOptimizerFactory = ZeroRedundancyOptimizer::LocalOptimizerFactory;

  // Elements [offset, offset + length), in memory order, of parameter `index` (numbered across the
  // groups in order, as a state dict numbers them).
  struct Segment {
    int64_t index = 0;
    int64_t offset = 0;
    int64_t length = 0;
  };

  // `reducer`: DistributedDataParallel's, built with shard_gradients, over the same parameters as
  // `groups` (every trained parameter, in the groups one optimizer over them would take); it must
  // outlive this optimizer. Collective only in step() and clip_grad_norm().
  ZeroStage2Optimizer(std::shared_ptr<dist::Communicator> comm, const Reducer& reducer,
                      std::vector<torch::optim::OptimizerParamGroup> groups, const LocalOptimizerFactory& make_local);
  ZeroStage2Optimizer(const ZeroStage2Optimizer&) = delete;
  ZeroStage2Optimizer& operator=(const ZeroStage2Optimizer&) = delete;

  // Collective: this rank's parts step with this optimizer's group options, then every rank's
  // updated parts are gathered into every rank's weights. No closure.
  at::Tensor step(LossClosure closure = nullptr) override;

  // Collective: scales the reduced gradients (this rank's parts, every rank alike) down to a total
  // 2-norm of `max_norm` when above it, as torch.nn.utils.clip_grad_norm_ does over whole
  // gradients; returns the total norm before clipping. The squares are summed per rank, then over
  // ranks, so the norm equals the whole gradient's up to the order of that sum.
  double clip_grad_norm(double max_norm);

  // Throw ConfigError, as ZeroRedundancyOptimizer's: archives would hold one rank's parts.
  void save(torch::serialize::OutputArchive& archive) const override;
  void load(torch::serialize::InputArchive& archive) override;

  // The optimizer over this rank's parts: one flat tensor per segment, in local_segments()' order,
  // its groups mirroring this optimizer's.
  torch::optim::Optimizer& local_optimizer() { return *local_; }
  const torch::optim::Optimizer& local_optimizer() const { return *local_; }
  // What each of the local optimizer's parameters is part of.
  const std::vector<Segment>& local_segments() const { return local_segments_; }
  // Elements this rank steps.
  int64_t local_numel() const;
  dist::Communicator& communicator() const { return *comm_; }

 private:
  struct Parts;
  explicit ZeroStage2Optimizer(Parts parts);

  std::shared_ptr<dist::Communicator> comm_;
  std::vector<Segment> local_segments_;
  std::vector<std::vector<at::Tensor>> parts_by_rank_;  // flat views of the parameters, for the gather
  std::shared_ptr<torch::optim::Optimizer> local_;
};

}  // namespace dpt
