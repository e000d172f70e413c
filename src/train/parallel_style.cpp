// The four ways the trainer's replicas agree on a step (parallel_style.h), and the factory that
// picks one.

#include "parallel_style.h"

#include <torch/optim/sgd.h>

#include <map>

#include "dptrain/common/error.h"
#include "dptrain/compat/compat.h"
#include "dptrain/models/state_dict.h"
#include "dptrain/parallel/data_parallel.h"
#include "dptrain/parallel/ddp.h"
#include "dptrain/parallel/hvd.h"
#include "dptrain/parallel/ps/client.h"
#include "dptrain/parallel/replicas.h"

namespace dpt::train {

ParallelStyle::ParallelStyle(models::Classifier model, std::shared_ptr<dist::Communicator> comm, bool together)
    : model_(std::move(model)), comm_(comm), lockstep_(std::move(comm), together) {}

void ParallelStyle::before_evaluate() {
  if (lockstep_.together() && comm_->size() > 1) broadcast_coalesced(*comm_, model_->buffers(), /*root=*/0);
}

namespace {

// --mode ddp: DistributedDataParallel, gradients averaged over the ranks during backward.
class DdpStyle : public ParallelStyle {
 public:
  DdpStyle(models::Classifier model, std::shared_ptr<dist::Communicator> comm, const ReducerOptions& reducer)
      : ParallelStyle(model, comm, /*together=*/true), ddp_(model, comm, DDPOptions().reducer(reducer)) {}

  at::Tensor forward(const at::Tensor& images) override { return ddp_.forward(images); }
  // As an optimizer over the reduced parameters clears them (ZeRO-2's optimizer is built over
  // this style's reducer, after it).
  void zero_grad() override { compat::zero_grad(ddp_.parameters()); }
  void backward(const at::Tensor& loss, bool reduce) override {
    if (reduce) {
      loss.backward();
      return;
    }
    auto local_only = ddp_.no_sync();
    loss.backward();
  }
  const Reducer* reducer() const override { return &ddp_.reducer(); }
  std::string describe() const override { return "DistributedDataParallel"; }

 private:
  DistributedDataParallel<models::Classifier> ddp_;
};

// --mode dp: one process, torch.nn.DataParallel's way. The batch of a step is split over the
// replicas; backward leaves the whole batch's gradient in the model's .grad, so the optimizer
// steps the model itself and evaluation runs on it.
class DpStyle : public ParallelStyle {
 public:
  DpStyle(models::Classifier model, std::vector<torch::Device> devices,
          std::shared_ptr<torch::optim::Optimizer> optimizer, std::shared_ptr<dist::Communicator> comm)
      : ParallelStyle(model, std::move(comm), /*together=*/true),
        dp_(model, DataParallelOptions(std::move(devices))),
        optimizer_(std::move(optimizer)) {}

  at::Tensor forward(const at::Tensor& images) override { return dp_.forward(images); }
  void zero_grad() override { optimizer_->zero_grad(); }
  size_t replica_threads() const override { return dp_.replica_count(); }
  std::string describe() const override {
    std::string text = "DataParallel over " + std::to_string(dp_.replica_count()) + " replicas (";
    const auto& devices = dp_.options().devices();
    for (size_t k = 0; k < devices.size(); ++k) text += (k > 0 ? ", " : "") + devices[k].str();
    return text + ")";
  }

 private:
  DataParallel<models::Classifier> dp_;
  std::shared_ptr<torch::optim::Optimizer> optimizer_;
};

// --mode hvd: Horovod's recipe. Rank 0's weights and optimizer state are broadcast once, then
// hvd::DistributedOptimizer averages the gradients during backward through the same reducer as
// DistributedDataParallel.
class HvdStyle : public ParallelStyle {
 public:
  HvdStyle(models::Classifier model, std::shared_ptr<torch::optim::Optimizer> optimizer,
           std::shared_ptr<dist::Communicator> comm)
      : ParallelStyle(std::move(model), comm, /*together=*/true),
        context_(std::move(comm)),
        optimizer_(make_optimizer(optimizer)) {}

  at::Tensor forward(const at::Tensor& images) override { return model_->forward(images); }
  void zero_grad() override { optimizer_.zero_grad(); }
  // Every backward runs the reducer (its hooks are the optimizer's).
  bool accumulates() const override { return false; }
  // The reducer has finished during backward; this only checks that it ran.
  void synchronize() override { optimizer_.synchronize(); }
  // (Horovod leaves BatchNorm's running statistics to each rank, where they drift apart; the
  // base class's before_evaluate() gives every rank rank 0's, as for DDP.)
  const Reducer* reducer() const override { return &optimizer_.reducer(); }
  std::string describe() const override { return "hvd::DistributedOptimizer"; }

 private:
  hvd::DistributedOptimizer make_optimizer(std::shared_ptr<torch::optim::Optimizer> optimizer) const {
    hvd::broadcast_parameters(context_, models::state_dict(*model_), /*root_rank=*/0);
    hvd::broadcast_optimizer_state(context_, *optimizer, /*root_rank=*/0);
    return hvd::DistributedOptimizer(context_, std::move(optimizer), model_->named_parameters());
  }

  hvd::Context context_;
  hvd::DistributedOptimizer optimizer_;
};

// --mode ps: the workers' side of a parameter server. Gradients are pushed during backward; the
// servers step, and synchronize() writes their weights into the model. The trainer's optimizer
// only carries the learning rate (read at every push) and, on rank 0, the momentum a checkpoint
// saves and a resume sends back to the servers.
class PsStyle : public ParallelStyle {
 public:
  PsStyle(const TrainOptions& options, models::Classifier model, std::shared_ptr<torch::optim::Optimizer> optimizer,
          std::shared_ptr<dist::Communicator> workers, std::shared_ptr<dist::Communicator> job)
      : ParallelStyle(std::move(model), std::move(workers),
                      /*together=*/options.parallel().ps().consistency() == ps::Consistency::Sync),
        optimizer_(std::move(optimizer)),
        options_(ps_options(options)),
        client_(served_parameters(*model_, options.optimizer()), std::move(job), options_) {}

  void start() override {
    std::vector<at::Tensor> momentum;
    for (const auto& p : trained_parameters()) {
      const auto key = compat::optimizer_state_key<std::decay_t<decltype(optimizer_->state())>>(p);
      auto found = optimizer_->state().find(key);
      momentum.push_back(found == optimizer_->state().end()
                             ? at::Tensor()
                             : static_cast<torch::optim::SGDParamState&>(*found->second).momentum_buffer());
    }
    client_.start(momentum);
  }
  at::Tensor forward(const at::Tensor& images) override { return model_->forward(images); }
  void zero_grad() override { optimizer_->zero_grad(); }
  void backward(const at::Tensor& loss, bool reduce) override {
    // Every group holds the schedule's rate (set_lr): the first one's is the step's.
    if (reduce) client_.prepare_for_backward(optimizer_->param_groups().front().options().get_lr(), ++pushes_);
    loss.backward();
  }
  void synchronize() override { client_.synchronize(); }
  bool applies_update() const override { return true; }
  void before_evaluate() override {
    // Apart, rank 0 validates alone (Lockstep), on the servers' weights of the moment.
    if (!lockstep().together()) {
      if (lockstep().validates()) adopt(client_.fetch_state(), /*momentum=*/false);
      return;
    }
    ParallelStyle::before_evaluate();
  }
  void gather_state() override { adopt(client_.fetch_state(), /*momentum=*/true); }
  std::string describe() const override {
    std::string text =
        str("parameter server (", options_.servers(), " server(s), ", ps::to_string(options_.consistency()));
    if (options_.consistency() == ps::Consistency::Bounded) text += str(" staleness ", options_.staleness());
    return text + ")";
  }

 private:
  std::vector<at::Tensor> trained_parameters() const {
    std::vector<at::Tensor> trained;
    for (const auto& p : model_->parameters()) {
      if (p.requires_grad()) trained.push_back(p);
    }
    return trained;
  }
  // The servers' weights into the model, and with `momentum` their momentum into the optimizer's state.
  void adopt(const ps::ServedState& state, bool momentum) {
    torch::NoGradGuard no_grad;
    const auto params = trained_parameters();
    for (size_t i = 0; i < params.size(); ++i) {
      params[i].copy_(state.weights[i]);
      if (!momentum || !state.momentum[i].defined()) continue;
      auto buffer = std::make_unique<torch::optim::SGDParamState>();
      buffer->momentum_buffer(state.momentum[i]);
      optimizer_->state()[compat::optimizer_state_key<std::decay_t<decltype(optimizer_->state())>>(params[i])] =
          std::move(buffer);
    }
  }

  std::shared_ptr<torch::optim::Optimizer> optimizer_;
  ps::PsOptions options_;
  ps::ParameterServerClient client_;
  int64_t pushes_ = 0;
};

std::unique_ptr<ParallelStyle> make_dp_style(const TrainOptions& options, models::Classifier model,
                                             std::shared_ptr<torch::optim::Optimizer> optimizer,
                                             std::shared_ptr<dist::Communicator> comm) {
  DPT_CHECK(comm->size() == 1, ConfigError, "rank ", comm->rank(), ": --mode dp runs in one process driving ",
            "several replicas, but this process is one of ", comm->size(),
            "; start it without a launcher, or use --mode ddp");
  // Autocast is a per-thread setting and the replicas run in their own threads.
  DPT_CHECK(!options.amp(), ConfigError, "--amp is not supported with --mode dp; use --mode ddp");
  // SyncBatchNorm reduces over processes; dp's replicas share one.
  DPT_CHECK(!options.parallel().sync_bn(), ConfigError, "--sync-bn needs one process per replica; use --mode ddp");
  // The heads' logits stay in the replicas that computed them.
  DPT_CHECK(!model->has_auxiliary_heads(), ConfigError, "--mode dp cannot train the auxiliary classifiers of ",
            options.arch(), "; use --mode ddp, or train without them (--no-aux-logits)");
  return std::make_unique<DpStyle>(std::move(model), data_parallel_devices(options.parallel()), std::move(optimizer),
                                   std::move(comm));
}

}  // namespace

std::vector<ps::ServedParameter> served_parameters(const torch::nn::Module& model, const OptimizerOptions& options) {
  std::map<std::string, double> weight_decay;
  for (const auto& group : weight_decay_groups(model, options)) {
    for (const auto& name : group.parameter_names) weight_decay[name] = group.weight_decay;
  }
  std::vector<ps::ServedParameter> served;
  for (const auto& p : model.named_parameters()) {
    if (p.value().requires_grad()) served.push_back({p.key(), p.value(), weight_decay.at(p.key())});
  }
  return served;
}

ps::SgdRule ps_sgd_rule(const TrainOptions& options) {
  const OptimizerOptions& o = options.optimizer();
  DPT_CHECK(o.kind() == OptimizerKind::Sgd || o.kind() == OptimizerKind::SgdNesterov, ConfigError,
            "--mode ps runs SGD on the servers; --opt ", to_string(o.kind()), " is not supported there (use sgd or ",
            "sgd_nesterov)");
  DPT_CHECK(!o.clip_grad_norm(), ConfigError, "--clip-grad-norm needs the whole gradient in one place; with --mode ps ",
            "each server sees only its shard. Train without it, or use --mode ddp");
  return ps::SgdRule().momentum(o.momentum()).nesterov(o.kind() == OptimizerKind::SgdNesterov);
}

ps::PsOptions ps_options(const TrainOptions& options) {
  ps_sgd_rule(options);  // (its checks)
  const ParallelOptions& parallel = options.parallel();
  return ps::PsOptions(parallel.ps()).buckets(parallel.reducer()).timeout(parallel.dist().timeout());
}

std::vector<torch::Device> data_parallel_devices(const ParallelOptions& o) {
  DPT_CHECK(o.gpus().empty() != !o.replicas().has_value(), ConfigError,
            "--mode dp needs exactly one of --replicas K (CPU replicas) and --gpus LIST (CUDA devices)");
  if (!o.gpus().empty()) return cuda_devices(o.gpus());
  DPT_CHECK(*o.replicas() >= 1, ConfigError, "--replicas must be at least 1, got ", *o.replicas());
  return cpu_devices(*o.replicas());
}

std::unique_ptr<ParallelStyle> make_parallel_style(const TrainOptions& options, models::Classifier model,
                                                   std::shared_ptr<torch::optim::Optimizer> optimizer,
                                                   std::shared_ptr<dist::Communicator> comm,
                                                   std::shared_ptr<dist::Communicator> job) {
  switch (options.parallel().mode()) {
    case ParallelMode::Ddp:
      // ZeRO-2: the reducer reduce-scatters, each rank keeping its part of every bucket.
      return std::make_unique<DdpStyle>(
          std::move(model), std::move(comm),
          ReducerOptions(options.parallel().reducer()).shard_gradients(options.parallel().zero_stage() == 2));
    case ParallelMode::Dp:
      return make_dp_style(options, std::move(model), std::move(optimizer), std::move(comm));
    case ParallelMode::Hvd:
      return std::make_unique<HvdStyle>(std::move(model), std::move(optimizer), std::move(comm));
    case ParallelMode::Ps:
      return std::make_unique<PsStyle>(options, std::move(model), std::move(optimizer), std::move(comm),
                                       std::move(job));
  }
  DPT_ASSERT(false, "unknown ParallelMode");
  return nullptr;
}

}  // namespace dpt::train
