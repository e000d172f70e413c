// --mode dp: one process, torch.nn.DataParallel's way. The batch of a step is split over the
// replicas; backward leaves the whole batch's gradient in the model's .grad, so the optimizer
// steps the model itself and evaluation runs on it.
#include "../parallel_style.h"

#include "dptrain/common/error.h"
#include "dptrain/parallel/data_parallel.h"
#include "dptrain/parallel/replicas.h"

namespace dpt::train {
namespace {

// The devices of the replicas: cuda_devices(gpus) or `replicas` CPU replicas; the first is where
// the model lives. ConfigError unless exactly one of the two is given.
std::vector<torch::Device> replica_devices(const ParallelOptions& o) {
  DPT_CHECK(o.gpus().empty() != !o.replicas().has_value(), ConfigError,
            "--mode dp needs exactly one of --replicas K (CPU replicas) and --gpus LIST (CUDA devices)");
  if (!o.gpus().empty()) return cuda_devices(o.gpus());
  DPT_CHECK(*o.replicas() >= 1, ConfigError, "--replicas must be at least 1, got ", *o.replicas());
  return cpu_devices(*o.replicas());
}

class DpStyle : public ParallelStyle {
 public:
  explicit DpStyle(const StyleInputs& in)
      : ParallelStyle(in.model, in.comm, /*together=*/true),
        dp_(in.model, DataParallelOptions(replica_devices(in.options.parallel()))) {
    optimizer_ = in.make_optimizer();
  }

  at::Tensor forward(const at::Tensor& images) override { return dp_.forward(images); }
  size_t replica_threads() const override { return dp_.replica_count(); }
  std::string describe() const override {
    std::string text = "DataParallel over " + std::to_string(dp_.replica_count()) + " replicas (";
    const auto& devices = dp_.options().devices();
    for (size_t k = 0; k < devices.size(); ++k) text += (k > 0 ? ", " : "") + devices[k].str();
    return text + ")";
  }

 private:
  DataParallel<models::Classifier> dp_;
};

class DpKind : public StyleKind {
 public:
  ParallelMode mode() const override { return ParallelMode::Dp; }
  bool accepts(StyleFlag flag) const override {
    switch (flag) {
      case StyleFlag::Replicas:
      case StyleFlag::AccumSteps:
      case StyleFlag::ClipGradNorm: return true;
      default: return false;
    }
  }
  std::string refusal(StyleFlag flag) const override {
    switch (flag) {
      // Autocast is a per-thread setting and the replicas run in their own threads.
      case StyleFlag::Amp: return "--amp is not supported with --mode dp; use --mode ddp";
      // SyncBatchNorm reduces over processes; dp's replicas share one.
      case StyleFlag::SyncBn: return "--sync-bn needs one process per replica; use --mode ddp";
      default: return StyleKind::refusal(flag);
    }
  }
  bool one_process() const override { return true; }
  // The model lives on the first replica's device.
  at::Device model_device(at::Device /*process_device*/, const ParallelOptions& options) const override {
    return replica_devices(options).front();
  }
  std::unique_ptr<ParallelStyle> make(const StyleInputs& in) const override {
    DPT_CHECK(in.comm->size() == 1, ConfigError, "rank ", in.comm->rank(), ": --mode dp runs in one process driving ",
              "several replicas, but this process is one of ", in.comm->size(),
              "; start it without a launcher, or use --mode ddp");
    // The heads' logits stay in the replicas that computed them.
    DPT_CHECK(!in.model->has_auxiliary_heads(), ConfigError, "--mode dp cannot train the auxiliary classifiers of ",
              in.options.arch(), "; use --mode ddp, or train without them (--no-aux-logits)");
    return std::make_unique<DpStyle>(in);
  }
};

}  // namespace

const StyleKind& dp_style_kind() {
  static const DpKind kind;
  return kind;
}

}  // namespace dpt::train
