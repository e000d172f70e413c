// --mode hvd: Horovod's recipe. Rank 0's weights and optimizer state are broadcast once, then
// hvd::DistributedOptimizer averages the gradients during backward through the same reducer as
// DistributedDataParallel.
#include "../parallel_style.h"

#include "dptrain/models/state_dict.h"
#include "dptrain/parallel/hvd.h"

namespace dpt::train {
namespace {

class HvdStyle : public ParallelStyle {
 public:
  explicit HvdStyle(const StyleInputs& in)
      : ParallelStyle(in.model, in.comm, /*together=*/true),
        context_(in.comm),
        // (The base is whole by now: the optimizer it holds is the one distributed.)
        distributed_(distribute(optimizer_ = in.make_optimizer())) {}

  at::Tensor forward(const at::Tensor& images) override { return model_->forward(images); }
  void zero_grad() override { distributed_.zero_grad(); }
  // The reducer has finished during backward; this only checks that it ran.
  void synchronize() override { distributed_.synchronize(); }
  // (Horovod leaves BatchNorm's running statistics to each rank, where they drift apart; the
  // base class's before_evaluate() gives every rank rank 0's, as for DDP.)
  const Reducer* reducer() const override { return &distributed_.reducer(); }
  std::string describe() const override { return "hvd::DistributedOptimizer"; }

 private:
  hvd::DistributedOptimizer distribute(std::shared_ptr<torch::optim::Optimizer> optimizer) const {
    hvd::broadcast_parameters(context_, models::state_dict(*model_), /*root_rank=*/0);
    hvd::broadcast_optimizer_state(context_, *optimizer, /*root_rank=*/0);
    return hvd::DistributedOptimizer(context_, std::move(optimizer), model_->named_parameters());
  }

  hvd::Context context_;
  hvd::DistributedOptimizer distributed_;
};

class HvdKind : public StyleKind {
 public:
  ParallelMode mode() const override { return ParallelMode::Hvd; }
  bool accepts(StyleFlag flag) const override {
    switch (flag) {
      case StyleFlag::SyncBn:
      case StyleFlag::Amp:
      case StyleFlag::ClipGradNorm: return true;
      default: return false;
    }
  }
  std::string refusal(StyleFlag flag) const override {
    if (flag == StyleFlag::AccumSteps) {
      return "--accum-steps needs --mode ddp, dp or ps: the Horovod style reduces the gradients in every backward";
    }
    return StyleKind::refusal(flag);
  }
  std::unique_ptr<ParallelStyle> make(const StyleInputs& inputs) const override {
    return std::make_unique<HvdStyle>(inputs);
  }
};

}  // namespace

const StyleKind& hvd_style_kind() {
  static const HvdKind kind;
  return kind;
}

}  // namespace dpt::train
