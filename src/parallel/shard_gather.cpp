#include "shard_gather.h"

#include <algorithm>
#include <optional>

#include <torch/csrc/autograd/grad_mode.h>

#include "dptrain/common/error.h"

namespace dpt::detail {

namespace {

int64_t total_numel(const std::vector<at::Tensor>& tensors) {
  int64_t n = 0;
  for (const auto& t : tensors) n += t.numel();
  return n;
}

// Calls visit(flat, flat_offset, run_offset, length) for each part of [from, from + count) of the
// tensors laid end to end.
template <typename Visit>
void for_each_run(const std::vector<at::Tensor>& flats, int64_t from, int64_t count, Visit&& visit) {
  int64_t start = 0;
  for (const at::Tensor& flat : flats) {
    const int64_t n = flat.numel();
    const int64_t lo = std::max(from, start), hi = std::min(from + count, start + n);
    if (lo < hi) visit(flat, lo - start, lo - from, hi - lo);
    start += n;
    if (start >= from + count) break;
  }
}

}  // namespace

at::Tensor flat_storage(const at::Tensor& dense) { return flat_slice(dense, 0, dense.numel()); }

at::Tensor flat_slice(const at::Tensor& dense, int64_t from, int64_t length) {
  DPT_ASSERT(dense.is_non_overlapping_and_dense(), "a flat slice needs a dense tensor, got strides ", dense.strides());
  DPT_ASSERT(from >= 0 && length >= 0 && from + length <= dense.numel(), "elements [", from, ", ", from + length,
             ") are not all in a tensor of ", dense.numel());
  return at::empty({0}, dense.options()).set_(dense.storage(), dense.storage_offset() + from, {length}, {1});
}

void check_gatherable(const std::vector<torch::optim::OptimizerParamGroup>& groups, int rank, const char* kind) {
  std::optional<at::TensorOptions> first;
  for (const auto& group : groups) {
    for (const auto& p : group.params()) {
      if (!first) first = p.options();
      DPT_CHECK(p.is_non_overlapping_and_dense(), ConfigError, "rank ", rank, ": ", kind, " gathers parameters as "
                "flat memory; a parameter of shape ", p.sizes(), " and strides ", p.strides(), " is not dense");
      DPT_CHECK(p.dtype() == first->dtype() && p.device() == first->device(), ConfigError, "rank ", rank, ": ", kind,
                " gathers the shards in one buffer, so every parameter needs one dtype and device; found ",
                first->dtype(), " on ", first->device(), " and ", p.dtype(), " on ", p.device());
    }
  }
}

void step_shard(const std::vector<torch::optim::OptimizerParamGroup>& groups, torch::optim::Optimizer& local) {
  auto& local_groups = local.param_groups();
  for (size_t g = 0; g < local_groups.size(); ++g) local_groups[g].set_options(groups[g].options().clone());
  local.step();
}

void refuse_archive(int rank, const char* kind, bool saving) {
  throw ConfigError(saving ? str("rank ", rank, ": a ", kind, " holds only its rank's shard of the state; gather it "
                                 "with dpt::train::consolidated_optimizer_state_dict instead of saving it")
                           : str("rank ", rank, ": a ", kind, " loads the whole optimizer's state dict "
                                 "(dpt::train::load_optimizer_state_dict), not an archive"));
}

void gather_shards(dist::Communicator& comm, const std::vector<std::vector<at::Tensor>>& parts) {
  const int world = comm.size();
  if (world == 1) return;
  int64_t width = 0;
  at::TensorOptions options;
  for (const auto& rank_parts : parts) {
    width = std::max(width, total_numel(rank_parts));
    if (!rank_parts.empty()) options = rank_parts.front().options();
  }
  if (width == 0) return;
  torch::NoGradGuard no_grad;
  const int64_t piece = std::min(width, kGatherPiece);
  at::Tensor mine = at::zeros({piece}, options);
  for (int64_t from = 0; from < width; from += piece) {
    for_each_run(parts[comm.rank()], from, piece, [&](const at::Tensor& flat, int64_t at, int64_t into, int64_t n) {
      mine.narrow(0, into, n).copy_(flat.narrow(0, at, n));
    });
    const dist::CollectiveLabel label(str("ZeRO shards, elements ", from, " of ", width));
    const std::vector<at::Tensor> pieces = comm.all_gather(mine);
    for (int rank = 0; rank < world; ++rank) {
      if (rank == comm.rank()) continue;
      for_each_run(parts[rank], from, piece, [&](const at::Tensor& flat, int64_t at, int64_t into, int64_t n) {
        flat.narrow(0, at, n).copy_(pieces[rank].narrow(0, into, n));
      });
    }
  }
}

}  // namespace dpt::detail
