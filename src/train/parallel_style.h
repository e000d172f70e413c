#pragma once
// How the trainer's replicas come to agree on a step (ParallelOptions::mode): the parts of a
// training step that differ between DistributedDataParallel, single-process DataParallel, the
// Horovod style and the parameter server's workers, the optimizer each steps (sharded over the
// ranks or whole), and whether the ranks step together at all (lockstep()). Everything else
// (sampler, schedule, metrics, checkpoints) is the trainer's and the same in every style;
// checkpoints always hold the plain model's names. A parameter server's server process runs no
// style: its role is decided before a trainer exists (ps_server_role.h, StyleTraits::serves).
//
// One file a style (styles/ddp.cpp, dp.cpp, hvd.cpp, ps.cpp), each with its kind: what the style
// says of itself before it exists (StyleTraits, style_traits.h) and how it is built.
//
//   auto style = style_kind(options.parallel().mode()).make({options, model, comm, job});
//   style->zero_grad();
//   auto loss = cross_entropy(style->forward(images), labels);
//   style->backward(loss, /*reduce=*/true);
//   style->synchronize();            // the gradients are now the reduced ones
//   if (!style->applies_update()) style->optimizer()->step();
//   auto all = style->lockstep().sum(local_metrics);

#include <memory>
#include <string>
#include <vector>

#include <torch/optim/optimizer.h>

#include "dptrain/compat/pickle.h"
#include "dptrain/dist/communicator.h"
#include "dptrain/models/classifier.h"
#include "dptrain/parallel/reducer.h"
#include "dptrain/parallel/sharded_optimizer.h"
#include "dptrain/train/style_traits.h"
#include "dptrain/train/train_options.h"
#include "lockstep.h"

namespace dpt::train {

class ParallelStyle {
 public:
  // `comm`: the ranks that train; `together`: whether they take their steps together (Lockstep).
  // The style's constructor sets its optimizer (optimizer_, and sharded_ when it shards it).
  ParallelStyle(models::Classifier model, std::shared_ptr<dist::Communicator> comm, bool together);
  virtual ~ParallelStyle() = default;
  ParallelStyle(const ParallelStyle&) = delete;
  ParallelStyle& operator=(const ParallelStyle&) = delete;

  // Where the ranks meet outside the gradient exchange: metric sums, validation, barriers.
  const Lockstep& lockstep() const { return lockstep_; }

  // The optimizer over the model's trained parameters: what a schedule sets the rate of,
  // checkpoints save and, unless applies_update(), the trainer steps.
  const std::shared_ptr<torch::optim::Optimizer>& optimizer() const { return optimizer_; }
  // The same optimizer where the style shards it over the ranks (--zero); null where it is whole.
  const std::shared_ptr<ShardedOptimizer>& sharded_optimizer() const { return sharded_; }

  // Once the model and optimizer hold their starting state (fresh, pretrained or resumed), before
  // the first step.
  virtual void start() {}
  // The training forward of this process's whole batch.
  virtual at::Tensor forward(const at::Tensor& images) = 0;
  // Before the step's forward.
  virtual void zero_grad() { optimizer_->zero_grad(); }
  // Backward of one micro-batch's loss. With `reduce` false the gradients only accumulate here,
  // to be reduced with a later micro-batch's (--accum-steps), as under DDP's no_sync().
  virtual void backward(const at::Tensor& loss, bool /*reduce*/) { loss.backward(); }
  // After the step's last backward, before the optimizer steps.
  virtual void synchronize() {}
  // Whether synchronize() leaves the stepped weights in the model (the parameter servers ran the
  // optimizer), so that the trainer's optimizer must not step.
  virtual bool applies_update() const { return false; }
  // Scales the reduced gradients down to a total 2-norm of `max_norm`, as
  // torch.nn.utils.clip_grad_norm_ does (collective where the style spreads them over the ranks).
  double clip_grad_norm(double max_norm);
  // On rank 0 before it writes a checkpoint: brings state kept elsewhere (the servers' weights and
  // momentum) into the model and optimizer.
  virtual void gather_state() {}
  // Before a validation pass of the model. Validation is split over the ranks and runs the model
  // itself, so in lockstep every rank first takes rank 0's buffers (BatchNorm's statistics, which
  // each rank's own batches moved): the pass then measures the model rank 0 checkpoints.
  virtual void before_evaluate();
  // What the style's gradient exchange keeps between steps (--comm-hook powersgd's state), for a
  // checkpoint. Collective: every rank calls it; the whole on rank 0, empty on the others and in
  // styles that keep nothing.
  virtual c10::impl::GenericDict gather_comm_hook_state() { return compat::string_dict(); }
  // Takes back what gather_comm_hook_state() returned in an earlier run (a resume). Returns a note
  // on what could not be (PowerSGD's errors at another world size), else "".
  virtual std::string load_comm_hook_state(const c10::impl::GenericDict& /*state*/) { return ""; }
  // The bucket size (MiB) the style chose by measuring its first steps (DDP's BucketTuner), for
  // checkpoints; 0 while it has chosen none, and in styles that do not choose.
  virtual double tuned_bucket_cap_mb() const { return 0; }
  // Takes back tuned_bucket_cap_mb() of an earlier run (a resume), which then measures nothing.
  virtual void resume_bucket_cap(double /*mb*/) {}
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
  std::shared_ptr<torch::optim::Optimizer> optimizer_;
  std::shared_ptr<ShardedOptimizer> sharded_;

 private:
  Lockstep lockstep_;
};

// What every style is built from.
struct StyleInputs {
  const TrainOptions& options;
  models::Classifier model;                    // on its device already
  std::shared_ptr<dist::Communicator> comm;    // the ranks that train (StyleTraits::trainers)
  std::shared_ptr<dist::Communicator> job;     // the whole job (with the parameter servers)

  // The run's optimizer (--opt, its weight-decay groups, --lr) over the model's trained parameters,
  // or over `groups` (a shard of them).
  std::shared_ptr<torch::optim::Optimizer> make_optimizer() const;
  std::shared_ptr<torch::optim::Optimizer> make_optimizer(std::vector<torch::optim::OptimizerParamGroup> groups) const;
  // The groups make_optimizer() forms, for an optimizer that shards them.
  std::vector<torch::optim::OptimizerParamGroup> param_groups() const;
};

// A style as its mode names it: its traits, and how one is built.
class StyleKind : public StyleTraits {
 public:
  // ConfigError for combinations the style cannot run.
  virtual std::unique_ptr<ParallelStyle> make(const StyleInputs& inputs) const = 0;
};

const StyleKind& style_kind(ParallelMode mode);
// Each style's own, in its file under styles/.
const StyleKind& ddp_style_kind();
const StyleKind& dp_style_kind();
const StyleKind& hvd_style_kind();
const StyleKind& ps_style_kind();

}  // namespace dpt::train
