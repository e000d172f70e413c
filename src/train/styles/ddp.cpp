// --mode ddp: DistributedDataParallel, gradients averaged over the ranks during backward; with
// --zero, the optimizer (and under ZeRO-2 the reduced gradients) sharded over the ranks.
#include "../parallel_style.h"

#include "dptrain/compat/compat.h"
#include "dptrain/compat/pickle.h"
#include "dptrain/parallel/comm_hook_options.h"
#include "dptrain/parallel/ddp.h"
#include "dptrain/train/checkpoint/powersgd_state.h"

namespace dpt::train {
namespace {

class DdpStyle : public ParallelStyle {
 public:
  explicit DdpStyle(const StyleInputs& in)
      : ParallelStyle(in.model, in.comm, /*together=*/true),
        ddp_(in.model, in.comm,
             DDPOptions().reducer(ReducerOptions(in.options.parallel().reducer())
                                      // ZeRO-2: each bucket reduce-scattered, each rank keeping its part.
                                      .shard_gradients(in.options.parallel().zero_stage() == 2))),
        comm_hook_(in.options.parallel().comm_hook()) {
    const int stage = in.options.parallel().zero_stage();
    if (comm_hook_.kind() != CommHookKind::Allreduce) ddp_.register_comm_hook(make_comm_hook(comm_hook_, &powersgd_));
    if (stage == 0) {
      optimizer_ = in.make_optimizer();
      return;
    }
    // Over this style's reducer, whose buckets the stage-2 optimizer's parts are cut from.
    optimizer_ = sharded_ = make_sharded_optimizer(
        stage, in.comm, in.param_groups(),
        [&in](std::vector<torch::optim::OptimizerParamGroup> shard) { return in.make_optimizer(std::move(shard)); },
        &ddp_.reducer());
  }

  at::Tensor forward(const at::Tensor& images) override { return ddp_.forward(images); }
  // As an optimizer over the reduced parameters clears them (ZeRO-2's holds only its parts).
  void zero_grad() override { compat::zero_grad(ddp_.parameters()); }
  void backward(const at::Tensor& loss, bool reduce) override {
    if (reduce) {
      loss.backward();
      return;
    }
    auto local_only = ddp_.no_sync();
    loss.backward();
  }
  c10::impl::GenericDict gather_comm_hook_state() override {
    return powersgd_ ? gather_powersgd_state(*powersgd_, *comm_) : compat::string_dict();
  }
  std::string load_comm_hook_state(const c10::impl::GenericDict& state) override {
    if (!powersgd_ || state.size() == 0) return "";
    if (load_powersgd_state(*powersgd_, state, comm_->rank(), comm_->size())) return "";
    return "the checkpoint's PowerSGD errors belong to another number of processes: each starts without one (the "
           "rest of PowerSGD's state is resumed)";
  }
  const Reducer* reducer() const override { return &ddp_.reducer(); }
  std::string describe() const override {
    switch (comm_hook_.kind()) {
      case CommHookKind::Allreduce: return "DistributedDataParallel";
      case CommHookKind::PowerSGD:
        return str("DistributedDataParallel, PowerSGD rank ", comm_hook_.powersgd().matrix_approximation_rank(),
                   " from step ", comm_hook_.powersgd().start_iter());
      default: return str("DistributedDataParallel, ", to_string(comm_hook_.kind()), " allreduce");
    }
  }

 private:
  DistributedDataParallel<models::Classifier> ddp_;
  CommHookOptions comm_hook_;
  std::shared_ptr<PowerSGDState> powersgd_;  // --comm-hook powersgd
};

class DdpKind : public StyleKind {
 public:
  ParallelMode mode() const override { return ParallelMode::Ddp; }
  bool accepts(StyleFlag flag) const override {
    return flag != StyleFlag::ParameterServer && flag != StyleFlag::Replicas;
  }
  void check(const TrainOptions& options) const override {
    DPT_CHECK(options.parallel().zero_stage() != 2 || options.parallel().comm_hook().kind() == CommHookKind::Allreduce,
              ConfigError, "--comm-hook ", to_string(options.parallel().comm_hook().kind()),
              " cannot go with --zero 2, which reduce-scatters each bucket instead of all-reducing it; use --zero 1 "
              "(the optimizer's state sharded, the gradients whole)");
  }
  std::unique_ptr<ParallelStyle> make(const StyleInputs& inputs) const override {
    return std::make_unique<DdpStyle>(inputs);
  }
};

}  // namespace

const StyleKind& ddp_style_kind() {
  static const DdpKind kind;
  return kind;
}

}  // namespace dpt::train
