// --mode hvd: Horovod's recipe. Rank 0's weights and optimizer state are broadcast once, then
// hvd::DistributedOptimizer averages the gradients during backward through the same reducer as
// DistributedDataParallel.

#include "dptrain/models/state_dict.h"
#include "dptrain/parallel/hvd.h"
#include "parallel_style.h"

namespace dpt::train {

namespace {

class HvdStyle : public ParallelStyle {
 public:
  HvdStyle(models::ResNet model, std::shared_ptr<torch::optim::SGD> optimizer,
           std::shared_ptr<dist::Communicator> comm)
      : context_(std::move(comm)), model_(std::move(model)), optimizer_(make_optimizer(optimizer)) {}

  at::Tensor forward(const at::Tensor& images) override { return model_->forward(images); }
  void zero_grad() override { optimizer_.zero_grad(); }
  // The reducer has finished during backward; this only checks that it ran.
  void synchronize() override { optimizer_.synchronize(); }
  // Horovod leaves BatchNorm's running statistics to each rank, where they drift apart (each
  // follows its own batches). Validation is split over the ranks, so every rank first takes rank
  // 0's: the pass then measures the model rank 0 checkpoints, as DDP's buffer broadcast does.
  void before_evaluate() override { context_.broadcast_parameters(model_->named_buffers(), /*root_rank=*/0); }
  std::string describe() const override { return "hvd::DistributedOptimizer"; }

 private:
  hvd::DistributedOptimizer make_optimizer(std::shared_ptr<torch::optim::SGD> optimizer) const {
    context_.broadcast_parameters(models::state_dict(*model_), /*root_rank=*/0);
    context_.broadcast_optimizer_state(*optimizer, /*root_rank=*/0);
    return hvd::DistributedOptimizer(context_, std::move(optimizer), model_->named_parameters());
  }

  hvd::Context context_;
  models::ResNet model_;
  hvd::DistributedOptimizer optimizer_;
};

}  // namespace

std::unique_ptr<ParallelStyle> make_hvd_style(models::ResNet model, std::shared_ptr<torch::optim::SGD> optimizer,
                                              std::shared_ptr<dist::Communicator> comm) {
  return std::make_unique<HvdStyle>(std::move(model), std::move(optimizer), std::move(comm));
}

}  // namespace dpt::train
