#pragma once
// How the trainer's replicas come to agree on a step (TrainOptions::mode): the parts of a training
// step that differ between DistributedDataParallel, single-process DataParallel and the Horovod
// style. Everything else (sampler, schedule, metrics, checkpoints) is the trainer's and the same
// in every style; checkpoints always hold the plain model's names.
//
//   auto style = make_parallel_style(options, model, optimizer, comm);
//   style->zero_grad();
//   auto loss = cross_entropy(style->forward(images), labels);
//   style->backward(loss, /*reduce=*/true);
//   style->synchronize();            // the gradients are now the reduced ones
//   optimizer->step();

#include <memory>
#include <string>
#include <vector>

#include <torch/optim/optimizer.h>

#include "dptrain/dist/communicator.h"
#include "dptrain/models/classifier.h"
#include "dptrain/train/train_options.h"

namespace dpt::train {

class ParallelStyle {
 public:
  virtual ~ParallelStyle() = default;
  // The training forward of this process's whole batch.
  virtual at::Tensor forward(const at::Tensor& images) = 0;
  // Before the step's forward.
  virtual void zero_grad() = 0;
  // Backward of one micro-batch's loss. With `reduce` false the gradients only accumulate here,
  // to be reduced with a later micro-batch's (--accum-steps), as under DDP's no_sync().
  virtual void backward(const at::Tensor& loss, bool reduce) { loss.backward(); }
  // Whether backward(loss, false) holds the reduction back (else every backward reduces).
  virtual bool accumulates() const { return true; }
  // After the step's last backward, before the optimizer steps.
  virtual void synchronize() {}
  // Before a validation pass.
  virtual void before_evaluate() {}
  // For the start-up banner: "DistributedDataParallel", "DataParallel over 2 replicas (cpu, cpu)".
  virtual std::string describe() const = 0;
};

// The devices of --mode dp's replicas: cuda_devices(gpus) or `replicas` CPU replicas; the first
// is where the model lives. ConfigError unless exactly one of the two is given.
std::vector<torch::Device> data_parallel_devices(const ParallelOptions& options);

// The style options.parallel().mode() names, over `model` (already on its device) and `optimizer` (over the
// model's parameters). ConfigError for combinations the style cannot run.
std::unique_ptr<ParallelStyle> make_parallel_style(const TrainOptions& options, models::Classifier model,
                                                   std::shared_ptr<torch::optim::Optimizer> optimizer,
                                                   std::shared_ptr<dist::Communicator> comm);

}  // namespace dpt::train
