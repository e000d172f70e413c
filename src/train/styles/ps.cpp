// --mode ps: the workers' side of a parameter server. Gradients are pushed during backward; the
// servers step, and synchronize() writes their weights into the model. The trainer's optimizer
// only carries the learning rate (read at every push) and, on rank 0, the momentum a checkpoint
// saves and a resume sends back to the servers.
#include "ps.h"

#include <torch/optim/sgd.h>

#include <map>

#include "../parallel_style.h"
#include "dptrain/common/error.h"
#include "dptrain/compat/compat.h"
#include "dptrain/dist/init.h"
#include "dptrain/parallel/ps/client.h"

namespace dpt::train {
namespace {

class PsStyle : public ParallelStyle {
 public:
  explicit PsStyle(const StyleInputs& in)
      : ParallelStyle(in.model, in.comm,
                      /*together=*/in.options.parallel().ps().consistency() == ps::Consistency::Sync),
        options_(ps_options(in.options)),
        client_(served_parameters(*model_, in.options.optimizer()), in.job, options_) {
    optimizer_ = in.make_optimizer();
  }

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
  void backward(const at::Tensor& loss, bool reduce) override {
    // Every group holds the schedule's rate (optim::set_lr): the first one's is the step's.
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

  ps::PsOptions options_;
  ps::ParameterServerClient client_;
  int64_t pushes_ = 0;
};

class PsKind : public StyleKind {
 public:
  ParallelMode mode() const override { return ParallelMode::Ps; }
  bool accepts(StyleFlag flag) const override {
    switch (flag) {
      case StyleFlag::Zero:
      case StyleFlag::Replicas:
      case StyleFlag::ClipGradNorm:
      case StyleFlag::CommHook: return false;
      default: return true;
    }
  }
  std::string refusal(StyleFlag flag) const override {
    if (flag == StyleFlag::ClipGradNorm) {
      return "--clip-grad-norm needs the whole gradient in one place; with --mode ps each server sees only its "
             "shard. Train without it, or use --mode ddp";
    }
    return StyleKind::refusal(flag);
  }
  void check(const TrainOptions& options) const override {
    const optim::OptimizerKind kind = options.optimizer().kind();
    DPT_CHECK(kind == optim::OptimizerKind::Sgd || kind == optim::OptimizerKind::SgdNesterov, ConfigError,
              "--mode ps runs SGD on the servers; --opt ", to_string(kind), " is not supported there (use sgd or ",
              "sgd_nesterov)");
  }
  bool serves(const TrainOptions& options, const Environment& env) const override {
    const ParallelOptions& parallel = options.parallel();
    const dist::WorldInfo world = dist::detect_world(env, parallel.dist().world());
    return ps::Roles(world.world_size, parallel.ps().servers()).is_server(world.rank);
  }
  // The workers train as a group of their own; the job's communicator reaches the servers.
  std::shared_ptr<dist::Communicator> trainers(std::shared_ptr<dist::Communicator> job,
                                               const ParallelOptions& options) const override {
    return dist::new_group(*job, 0, ps::Roles(job->size(), options.ps().servers()).workers(), options.dist());
  }
  std::unique_ptr<ParallelStyle> make(const StyleInputs& inputs) const override {
    return std::make_unique<PsStyle>(inputs);
  }
};

}  // namespace

const StyleKind& ps_style_kind() {
  static const PsKind kind;
  return kind;
}

std::vector<ps::ServedParameter> served_parameters(const torch::nn::Module& model,
                                                   const optim::OptimizerOptions& options) {
  std::map<std::string, double> weight_decay;
  for (const auto& group : optim::weight_decay_groups(model, options)) {
    for (const auto& name : group.parameter_names) weight_decay[name] = group.weight_decay;
  }
  std::vector<ps::ServedParameter> served;
  for (const auto& p : model.named_parameters()) {
    if (p.value().requires_grad()) served.push_back({p.key(), p.value(), weight_decay.at(p.key())});
  }
  return served;
}

ps::SgdRule ps_sgd_rule(const TrainOptions& options) {
  const optim::OptimizerOptions& o = options.optimizer();
  return ps::SgdRule().momentum(o.momentum()).nesterov(o.kind() == optim::OptimizerKind::SgdNesterov);
}

ps::PsOptions ps_options(const TrainOptions& options) {
  const ParallelOptions& parallel = options.parallel();
  return ps::PsOptions(parallel.ps()).buckets(parallel.reducer()).timeout(parallel.dist().timeout());
}

}  // namespace dpt::train
