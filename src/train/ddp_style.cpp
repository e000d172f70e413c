// --mode ddp: DistributedDataParallel, gradients averaged over the ranks during backward.

#include "dptrain/parallel/ddp.h"
#include "parallel_style.h"

namespace dpt::train {

namespace {

class DdpStyle : public ParallelStyle {
 public:
  DdpStyle(models::ResNet model, std::shared_ptr<torch::optim::SGD> optimizer,
           std::shared_ptr<dist::Communicator> comm)
      : ddp_(std::move(model), std::move(comm)), optimizer_(std::move(optimizer)) {}

  at::Tensor forward(const at::Tensor& images) override { return ddp_.forward(images); }
  void zero_grad() override { optimizer_->zero_grad(); }
  // Validation is split over the ranks and runs the model itself, not ddp_.forward: every rank
  // first takes rank 0's BatchNorm statistics, so the pass measures the model rank 0 checkpoints.
  void before_evaluate() override { ddp_.broadcast_buffers(); }
  std::string describe() const override { return "DistributedDataParallel"; }

 private:
  DistributedDataParallel<models::ResNet> ddp_;
  std::shared_ptr<torch::optim::SGD> optimizer_;
};

}  // namespace

std::unique_ptr<ParallelStyle> make_ddp_style(models::ResNet model, std::shared_ptr<torch::optim::SGD> optimizer,
                                              std::shared_ptr<dist::Communicator> comm) {
  return std::make_unique<DdpStyle>(std::move(model), std::move(optimizer), std::move(comm));
}

}  // namespace dpt::train
