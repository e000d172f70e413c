#pragma once
// hvd::DistributedOptimizer: the Horovod front end of the Reducer. Horovod's tensor fusion is the
// reducer's buckets.

#include <memory>
#include <optional>

#include <torch/arg.h>
#include <torch/optim/optimizer.h>

#include "dptrain/parallel/hvd/context.h"
#include "dptrain/parallel/reducer.h"

namespace dpt::hvd {

// How gradients travel: as they are, or as float16 (half the bytes, float16's range and precision).
enum class Compression { None, Fp16 };

struct DistributedOptimizerOptions {
  // Gradients travel as float16 (Fp16) or in their own dtype.
  TORCH_ARG(Compression, compression) = Compression::None;
  // Backward passes per step: the first n-1 accumulate locally, the n-th reduces the sum of the
  // n passes' gradients (as Horovod, no division by n: scale the loss by 1/n for the mean).
  TORCH_ARG(int, backward_passes_per_step) = 1;
  // Average or Sum over ranks.
  TORCH_ARG(ReduceOp, op) = ReduceOp::Average;
  // Tensor fusion: gradients are packed, in the order backward produces them, into buffers of up
  // to this many bytes, each reduced in one collective. 0 reduces every tensor on its own. Unset:
  // the context's (HOROVOD_FUSION_THRESHOLD, else 64 MiB).
  TORCH_ARG(std::optional<int64_t>, fusion_threshold_bytes) = std::nullopt;
  // Tolerate parameters that get no gradient in a step (see ReducerOptions); without it such a
  // step fails with an error naming them.
  TORCH_ARG(bool, find_unused_parameters) = false;
};

// Wraps an optimizer: gradients are reduced across ranks during backward, bucket by bucket as
// they become ready, and the reducing backward returns only once all of them are reduced. So
// synchronize() (for gradient clipping before step) only checks that the reduction happened, and
// step() is synchronize() followed by the wrapped optimizer's step.
class DistributedOptimizer {
 public:
  // `named_parameters` names every parameter `optimizer` trains (model->named_parameters()); its
  // order, the model's registration order, decides the fusion buffers.
  DistributedOptimizer(std::shared_ptr<torch::optim::Optimizer> optimizer, const NamedTensors& named_parameters,
                       DistributedOptimizerOptions options = {});
  DistributedOptimizer(const Context& context, std::shared_ptr<torch::optim::Optimizer> optimizer,
                       const NamedTensors& named_parameters, DistributedOptimizerOptions options = {});
  DistributedOptimizer(const DistributedOptimizer&) = delete;
  DistributedOptimizer& operator=(const DistributedOptimizer&) = delete;

  // Zeroes the gradients and starts counting backward passes anew. Throws ConfigError between
  // the backward passes of one step (it would drop the passes already accumulated).
  void zero_grad();
  // Throws ConfigError unless this step's backward passes have all run (the gradients are then
  // reduced); does nothing when called again before step().
  void synchronize();
  void step();

  torch::optim::Optimizer& optimizer() { return *optimizer_; }
  const Reducer& reducer() const { return reducer_; }

 private:
  std::shared_ptr<torch::optim::Optimizer> optimizer_;
  std::shared_ptr<dist::Communicator> comm_;
  DistributedOptimizerOptions options_;
  Reducer reducer_;
};

}  // namespace dpt::hvd
