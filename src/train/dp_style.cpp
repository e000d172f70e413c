// --mode dp: one process, torch.nn.DataParallel's way. The batch of a step is split over the
// replicas; backward leaves the whole batch's gradient in the model's .grad, so the optimizer
// steps the model itself and evaluation runs on it.

#include "dptrain/common/error.h"
#include "dptrain/parallel/data_parallel.h"
#include "parallel_style.h"

namespace dpt::train {

namespace {

class DpStyle : public ParallelStyle {
 public:
  DpStyle(models::ResNet model, std::vector<torch::Device> devices, std::shared_ptr<torch::optim::SGD> optimizer)
      : dp_(std::move(model), DataParallelOptions(std::move(devices))), optimizer_(std::move(optimizer)) {}

  at::Tensor forward(const at::Tensor& images) override { return dp_.forward(images); }
  void zero_grad() override { optimizer_->zero_grad(); }
  std::string describe() const override {
    std::string text = "DataParallel over " + std::to_string(dp_.replica_count()) + " replicas (";
    const auto& devices = dp_.options().devices();
    for (size_t k = 0; k < devices.size(); ++k) text += (k > 0 ? ", " : "") + devices[k].str();
    return text + ")";
  }

 private:
  DataParallel<models::ResNet> dp_;
  std::shared_ptr<torch::optim::SGD> optimizer_;
};

}  // namespace

std::unique_ptr<ParallelStyle> make_dp_style(const TrainOptions& options, models::ResNet model,
                                             std::shared_ptr<torch::optim::SGD> optimizer,
                                             const dist::Communicator& comm) {
  DPT_CHECK(comm.size() == 1, ConfigError, "rank ", comm.rank(), ": --mode dp runs in one process driving ",
            "several replicas, but this process is one of ", comm.size(),
            "; start it without a launcher, or use --mode ddp");
  // Autocast is a per-thread setting and the replicas run in their own threads.
  DPT_CHECK(!options.amp(), ConfigError, "--amp is not supported with --mode dp; use --mode ddp");
  // SyncBatchNorm reduces over processes; dp's replicas share one.
  DPT_CHECK(!options.sync_bn(), ConfigError, "--sync-bn needs one process per replica; use --mode ddp");
  return std::make_unique<DpStyle>(std::move(model), data_parallel_devices(options), std::move(optimizer));
}

}  // namespace dpt::train
