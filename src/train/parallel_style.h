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
//   if (!style->applies_update()) optimizer->step();

#include <memory>
#include <string>
#include <vector>

#include <torch/optim/optimizer.h>

#include "dptrain/dist/communicator.h"
#include "dptrain/models/classifier.h"
#include "dptrain/parallel/ps/options.h"
#include "dptrain/parallel/reducer.h"
#include "dptrain/train/train_options.h"

namespace dpt::train {

class ParallelStyle {
 public:
  virtual ~ParallelStyle() = default;
  // Once the model and optimizer hold their starting state (fresh, pretrained or resumed), before
  // the first step.
  virtual void start() {}
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
  // Whether synchronize() leaves the stepped weights in the model (the parameter servers ran the
  // optimizer), so that the trainer's optimizer must not step.
  virtual bool applies_update() const { return false; }
  // Whether the ranks take their steps together. When not (an asynchronous parameter server), the
  // trainer never makes one rank wait for another: metrics are each rank's own, rank 0 validates
  // alone, and a worker that dies leaves the others training.
  virtual bool lockstep() const { return true; }
  // On rank 0 before it writes a checkpoint: brings state kept elsewhere (the servers' weights and
  // momentum) into the model and optimizer.
  virtual void gather_state() {}
  // Before a validation pass.
  virtual void before_evaluate() {}
  // The reducer whose buckets carry the gradients (its times go on the timeline); null for styles
  // without one.
  virtual const Reducer* reducer() const { return nullptr; }
  // For the start-up banner: "DistributedDataParallel", "DataParallel over 2 replicas (cpu, cpu)".
  virtual std::string describe() const = 0;
};

// The devices of --mode dp's replicas: cuda_devices(gpus) or `replicas` CPU replicas; the first
// is where the model lives. ConfigError unless exactly one of the two is given.
std::vector<torch::Device> data_parallel_devices(const ParallelOptions& options);

// Mode Ps: the parameters the servers hold (those that require gradients, in the model's order),
// each with its optimizer group's weight decay.
std::vector<ps::ServedParameter> served_parameters(const torch::nn::Module& model, const OptimizerOptions& options);

// Mode Ps: the servers' options and their SGD rule, from the run's; ConfigError for what the
// parameter server cannot run (optimizers other than SGD, gradient clipping).
ps::PsOptions ps_options(const TrainOptions& options);
ps::SgdRule ps_sgd_rule(const TrainOptions& options);

// The style options.parallel().mode() names, over `model` (already on its device) and `optimizer` (over the
// model's parameters). `comm`: the ranks that train (mode Ps: the workers' group); `job`: the
// whole job (mode Ps: workers and servers; else `comm`). ConfigError for combinations the style cannot run.
std::unique_ptr<ParallelStyle> make_parallel_style(const TrainOptions& options, models::Classifier model,
                                                   std::shared_ptr<torch::optim::Optimizer> optimizer,
                                                   std::shared_ptr<dist::Communicator> comm,
                                                   std::shared_ptr<dist::Communicator> job);

}  // namespace dpt::train
