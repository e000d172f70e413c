#pragma once
// Which backend a process group uses, and which GPU a rank drives: decided before the
// rendezvous from what this process sees, so that a job that cannot work stops at once with the
// counts instead of hanging in (or being refused by) NCCL.
//
//   auto choice = dpt::dist::choose_backend("auto", dpt::dist::GpuView{...});
//   if (!choice.note.empty()) std::cerr << choice.note << "\n";  // why not NCCL, once per node
//
// NCCL cannot put two ranks of one group on one GPU, so it needs a GPU of its own for every
// process on the node: either each process sees them all and takes cuda:<local rank>, or the
// launcher gave each process its own list (`dptrain launch --gpus`: CUDA_VISIBLE_DEVICES names
// one GPU) and it takes cuda:0. `auto` takes NCCL only then, and Gloo otherwise (saying why when
// GPUs exist); `nccl` asked for where it cannot work is a ConfigError naming the counts.

#include <string>

namespace dpt::dist {

// What one process knows about the GPUs of its node.
struct GpuView {
  int rank = 0;
  int local_rank = 0;
  int local_world_size = 1;
  int visible_gpus = 0;     // CUDA devices this process sees (CUDA_VISIBLE_DEVICES respected)
  bool own_gpus = false;    // the launcher gave this process a device list of its own
  bool nccl_built = false;  // this build has the NCCL backend
};

struct BackendChoice {
  std::string backend;  // "gloo" or "nccl"
  int device = -1;      // the CUDA device index NCCL drives; -1 for Gloo
  std::string note;     // why `auto` did not take NCCL on a node with GPUs; empty otherwise
};

// `requested` is "auto", "gloo" or "nccl"; ConfigError for anything else, for "nccl" without the
// backend built, and for "nccl" with fewer GPUs than the node's processes.
BackendChoice choose_backend(const std::string& requested, const GpuView& view);

}  // namespace dpt::dist
