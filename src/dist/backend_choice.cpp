#include "dptrain/dist/backend_choice.h"

#include "dptrain/common/error.h"

namespace dpt::dist {

namespace {

// Processes that must find distinct GPUs among the ones this process sees.
int sharing(const GpuView& view) { return view.own_gpus ? 1 : view.local_world_size; }

bool gpu_per_process(const GpuView& view) { return view.visible_gpus > 0 && view.visible_gpus >= sharing(view); }

BackendChoice nccl(const GpuView& view) { return {"nccl", view.own_gpus ? 0 : view.local_rank, ""}; }

}  // namespace

BackendChoice choose_backend(const std::string& requested, const GpuView& view) {
  if (requested == "gloo") return {"gloo", -1, ""};
  if (requested == "nccl") {
    DPT_CHECK(view.nccl_built, ConfigError, "rank ", view.rank,
              ": this build of dptrain has no NCCL backend (LibTorch without CUDA); use --dist-backend gloo");
    DPT_CHECK(view.visible_gpus > 0, ConfigError, "rank ", view.rank,
              ": the nccl backend needs a CUDA device and none is visible (CUDA_VISIBLE_DEVICES); use "
              "--dist-backend gloo");
    DPT_CHECK(gpu_per_process(view), ConfigError, "rank ", view.rank, ": the nccl backend needs a GPU of its own for ",
              "each of the ", view.local_world_size, " processes on this node, and ", view.visible_gpus,
              " are visible: NCCL cannot put two ranks on one GPU. Start at most ", view.visible_gpus,
              " per node (--nproc-per-node ", view.visible_gpus, "), or use --dist-backend gloo");
    return nccl(view);
  }
  DPT_CHECK(requested == "auto", ConfigError, "unknown backend '", requested, "'; use gloo, nccl or auto");
  if (view.nccl_built && gpu_per_process(view)) return nccl(view);
  BackendChoice gloo{"gloo", -1, ""};
  if (view.nccl_built && view.visible_gpus > 0) {
    gloo.note = str("dist backend auto: gloo, not nccl: ", view.local_world_size, " processes on this node and ",
                    view.visible_gpus, " visible GPU(s), and NCCL needs a GPU per process (--nproc-per-node ",
                    view.visible_gpus, " would use it)");
  }
  return gloo;
}

}  // namespace dpt::dist
