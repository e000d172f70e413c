// --mode ddp: DistributedDataParallel, gradients averaged over the ranks during backward; with
// --zero, the optimizer (and under ZeRO-2 the reduced gradients) sharded over the ranks.
#include "../parallel_style.h"

#include "dptrain/compat/compat.h"
#include "dptrain/parallel/ddp.h"

namespace dpt::train {
namespace {

class DdpStyle : public ParallelStyle {
 public:
  explicit DdpStyle(const StyleInputs& in)
      : ParallelStyle(in.model, in.comm, /*together=*/true),
        ddp_(in.model, in.comm,
             DDPOptions().reducer(ReducerOptions(in.options.parallel().reducer())
                                      // ZeRO-2: each bucket reduce-scattered, each rank keeping its part.
                                      .shard_gradients(in.options.parallel().zero_stage() == 2))) {
    const int stage = in.options.parallel().zero_stage();
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
  const Reducer* reducer() const override { return &ddp_.reducer(); }
  std::string describe() const override { return "DistributedDataParallel"; }

 private:
  DistributedDataParallel<models::Classifier> ddp_;
};

class DdpKind : public StyleKind {
 public:
  ParallelMode mode() const override { return ParallelMode::Ddp; }
  bool accepts(StyleFlag flag) const override {
    return flag != StyleFlag::ParameterServer && flag != StyleFlag::Replicas;
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
