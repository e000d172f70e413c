#pragma once
// How the trainer's replicas come to agree on a step (ParallelOptions::mode): the parts of a
// training step that differ between DistributedDataParallel, single-process DataParallel, the
// Horovod style and the parameter server's workers, and whether the ranks step together at all
// (lockstep()). Everything else (sampler, schedule, metrics, checkpoints) is the trainer's and the
// same in every style; checkpoints always hold the plain model's names. A parameter server's
// server process runs no style: its role is decided before a trainer exists (ps_server_role.h).
//
//   auto style = make_parallel_style(options, model, optimizer, comm, job);
//   style->zero_grad();
//   auto loss = cross_entropy(style->forward(images), labels);
//   style->backward(loss, /*reduce=*/true);
//   style->synchronize();            // the gradients are now the reduced ones
//   if (!style->applies_update()) optimizer->step();
//   auto all = style->lockstep().sum(local_metrics);

#include <memory>
#include <string>
#include <vector>

#include <torch/optim/optimizer.h>

#include "dptrain/dist/communicator.h"
#include "dptrain/models/classifier.h"
#include "dptrain/parallel/ps/options.h"
#include "dptrain/parallel/reducer.h"
#include "dptrain/train/train_options.h"
#include "lockstep.h"

namespace dpt::train {

class ParallelStyle {
 public:
  // `comm`: the ranks that train; `together`: whether they take their steps together (Lockstep).
  ParallelStyle(models::Classifier model, std::shared_ptr<dist::Communicator> comm, bool together);
  virtual ~ParallelStyle() = default;
  ParallelStyle(const ParallelStyle&) = delete;
  ParallelStyle& operator=(const ParallelStyle&) = delete;

  // Where the ranks meet outside the gradient exchange: metric sums, validation, barriers.
  const Lockstep& lockstep() const { return lockstep_; }

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
  // On rank 0 before it writes a checkpoint: brings state kept elsewhere (the servers' weights and
  // momentum) into the model and optimizer.
  virtual void gather_state() {}
  // Before a validation pass of the model. Validation is split over the ranks and runs the model
  // itself, so in lockstep every rank first takes rank 0's buffers (BatchNorm's statistics, which
  // each rank's own batches moved): the pass then measures the model rank 0 checkpoints.
  virtual void before_evaluate();
  // The reducer whose buckets carry the gradients (its times go on the timeline); null for styles
  // without one.
  virtual const Reducer* reducer() const { return nullptr; }
  // For the start-up banner: "DistributedDataParallel", "DataParallel over 2 replicas (cpu, cpu)".
  virtual std::string describe() const = 0;
  // The model replicas this process runs as threads of its own (DataParallel's); 1 in the styles
  // where each process runs one.
  virtual size_t replica_threads() const { return 1; }

 protected:
  models::Classifier model_;
  std::shared_ptr<dist::Communicator> comm_;

 private:
  Lockstep lockstep_;
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
