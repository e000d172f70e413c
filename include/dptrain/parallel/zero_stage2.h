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
// Like ZeroRedundancyOptimizer it is a ShardedOptimizer (sharded_optimizer.h): an optimizer over
// every parameter (a schedule sets its groups' lr), whose own state() stays empty; its local
// optimizer's parameters are the flat parts. The parameters' .grad are unset after a reducing
// backward: clip with clip_grad_norm() here, not over the parameters.

#include <memory>
#include <string>
#include <vector>

#include "dptrain/dist/communicator.h"
#include "dptrain/parallel/reducer.h"
#include "dptrain/parallel/sharded_optimizer.h"

namespace dpt {

class ZeroStage2Optimizer : public ShardedOptimizer {
 public:
  // `reducer`: DistributedDataParallel's, built with shard_gradients, over the same parameters as
  // `groups` (every trained parameter, in the groups one optimizer over them would take); it must
  // outlive this optimizer. Collective only in step() and clip_grad_norm().
  ZeroStage2Optimizer(std::shared_ptr<dist::Communicator> comm, const Reducer& reducer,
                      std::vector<torch::optim::OptimizerParamGroup> groups, const LocalOptimizerFactory& make_local);

  // Collective: the squares of this rank's parts are summed, then over the ranks, so the norm
  // equals the whole gradient's up to the order of that sum.
  double clip_grad_norm(double max_norm) override;
  bool holds_whole_gradients() const override { return false; }
  std::string describe() const override {
    return "ZeRO-2: each process keeps its shard's state and reduced gradients";
  }
};

}  // namespace dpt
