// What every parallel style shares (parallel_style.h), and the one place that maps a mode to its
// style: each style lives in its own file under styles/.
#include "parallel_style.h"

#include <torch/nn/utils/clip_grad.h>

#include "dptrain/common/error.h"
#include "dptrain/parallel/replicas.h"
#include "dptrain/optim/optimizer.h"

namespace dpt::train {

ParallelStyle::ParallelStyle(models::Classifier model, std::shared_ptr<dist::Communicator> comm, bool together)
    : model_(std::move(model)), comm_(comm), lockstep_(std::move(comm), together) {}

void ParallelStyle::before_evaluate() {
  if (lockstep_.together() && comm_->size() > 1) broadcast_coalesced(*comm_, model_->buffers(), /*root=*/0);
}

double ParallelStyle::clip_grad_norm(double max_norm) {
  // Where the ranks hold parts of the reduced gradients (ZeRO-2 leaves the parameters' .grad
  // unset), their optimizer sums the norm over them. Where every rank holds them whole, over the
  // model's parameters in the model's order, as torchvision clips and whether sharded or not: the
  // order of the norm's sum decides its last bits, and so the weights'.
  if (sharded_ && !sharded_->holds_whole_gradients()) return sharded_->clip_grad_norm(max_norm);
  return torch::nn::utils::clip_grad_norm_(model_->parameters(), max_norm);
}

std::shared_ptr<torch::optim::Optimizer> StyleInputs::make_optimizer() const {
  return optim::make_optimizer(*model, options.optimizer(), options.schedule().base_lr());
}

std::shared_ptr<torch::optim::Optimizer> StyleInputs::make_optimizer(
    std::vector<torch::optim::OptimizerParamGroup> groups) const {
  return optim::make_optimizer(std::move(groups), options.optimizer(), options.schedule().base_lr());
}

std::vector<torch::optim::OptimizerParamGroup> StyleInputs::param_groups() const {
  return optim::optimizer_param_groups(*model, options.optimizer(), options.schedule().base_lr());
}

const StyleKind& style_kind(ParallelMode mode) {
  switch (mode) {
    case ParallelMode::Ddp: return ddp_style_kind();
    case ParallelMode::Dp: return dp_style_kind();
    case ParallelMode::Hvd: return hvd_style_kind();
    case ParallelMode::Ps: return ps_style_kind();
  }
  throw InternalError(str("no style for ParallelMode ", static_cast<int>(mode)));
}

}  // namespace dpt::train
