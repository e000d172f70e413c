#include "parallel_style.h"

#include "dptrain/common/error.h"
#include "dptrain/parallel/data_parallel.h"

namespace dpt::train {

ParallelMode parse_parallel_mode(const std::string& name) {
  if (name == "ddp") return ParallelMode::Ddp;
  if (name == "dp") return ParallelMode::Dp;
  if (name == "hvd") return ParallelMode::Hvd;
  DPT_CHECK(false, ConfigError, "unknown --mode '", name, "'; use ddp, dp or hvd");
  return ParallelMode::Ddp;
}

std::string to_string(ParallelMode mode) {
  switch (mode) {
    case ParallelMode::Ddp:
      return "ddp";
    case ParallelMode::Dp:
      return "dp";
    case ParallelMode::Hvd:
      return "hvd";
  }
  return "?";
}

std::vector<torch::Device> data_parallel_devices(const TrainOptions& o) {
  DPT_CHECK(o.gpus().empty() != !o.replicas().has_value(), ConfigError,
            "--mode dp needs exactly one of --replicas K (CPU replicas) and --gpus LIST (CUDA devices)");
  if (!o.gpus().empty()) return cuda_devices(o.gpus());
  DPT_CHECK(*o.replicas() >= 1, ConfigError, "--replicas must be at least 1, got ", *o.replicas());
  return cpu_devices(*o.replicas());
}

std::unique_ptr<ParallelStyle> make_parallel_style(const TrainOptions& options, models::ResNet model,
                                                   std::shared_ptr<torch::optim::SGD> optimizer,
                                                   std::shared_ptr<dist::Communicator> comm) {
  switch (options.mode()) {
    case ParallelMode::Ddp:
      return make_ddp_style(std::move(model), std::move(optimizer), std::move(comm));
    case ParallelMode::Dp:
      return make_dp_style(options, std::move(model), std::move(optimizer), *comm);
    case ParallelMode::Hvd:
      return make_hvd_style(std::move(model), std::move(optimizer), std::move(comm));
  }
  DPT_ASSERT(false, "unknown ParallelMode");
  return nullptr;
}

}  // namespace dpt::train
