#include "dptrain/parallel/zero.h"

#include <algorithm>
#include <numeric>
#include <optional>

#include "dptrain/common/error.h"

namespace dpt {

std::vector<std::vector<int>> assign_shards(const std::vector<std::vector<int64_t>>& group_numels, int world_size) {
  DPT_CHECK(world_size >= 1, ConfigError, "assign_shards needs a world of at least one rank, got ", world_size);
  std::vector<int64_t> owned(world_size, 0);
  std::vector<std::vector<int>> owners;
  for (const auto& numels : group_numels) {
    std::vector<size_t> largest_first(numels.size());
    std::iota(largest_first.begin(), largest_first.end(), 0);
    std::stable_sort(largest_first.begin(), largest_first.end(),
                     [&](size_t a, size_t b) { return numels[a] > numels[b]; });
    std::vector<int> group(numels.size());
    for (size_t index : largest_first) {
      const int rank = static_cast<int>(std::min_element(owned.begin(), owned.end()) - owned.begin());
      group[index] = rank;
      owned[rank] += numels[index];
    }
    owners.push_back(std::move(group));
  }
  return owners;
}

ZeroRedundancyOptimizer::ZeroRedundancyOptimizer(std::shared_ptr<dist::Communicator> comm,
                                                 std::vector<torch::optim::OptimizerParamGroup> groups,
                                                 const LocalOptimizerFactory& make_local)
    : comm_(std::move(comm)), shard_numel_(comm_->size(), 0) {
  std::vector<std::vector<int64_t>> numels;
  std::optional<at::TensorOptions> kind;
  for (const auto& group : groups) {
    params_.push_back(group.params());
    numels.emplace_back();
    for (const auto& p : group.params()) {
      numels.back().push_back(p.numel());
      if (!kind) kind = p.options();
      DPT_CHECK(p.dtype() == kind->dtype() && p.device() == kind->device(), ConfigError, "rank ", comm_->rank(),
                ": ZeroRedundancyOptimizer gathers the shards in one buffer, so every parameter needs one dtype "
                "and device; found ", kind->dtype(), " on ", kind->device(), " and ", p.dtype(), " on ", p.device());
    }
  }
  owners_ = assign_shards(numels, comm_->size());
  std::vector<torch::optim::OptimizerParamGroup> shard;
  for (size_t g = 0; g < groups.size(); ++g) {
    std::vector<at::Tensor> mine;
    for (size_t i = 0; i < params_[g].size(); ++i) {
      shard_numel_[owners_[g][i]] += params_[g][i].numel();
      if (owners_[g][i] == comm_->rank()) mine.push_back(params_[g][i]);
    }
    shard.emplace_back(std::move(mine));
    if (groups[g].has_options()) shard.back().set_options(groups[g].options().clone());
  }
  if (kind) buffer_options_ = *kind;
  gather_width_ = *std::max_element(shard_numel_.begin(), shard_numel_.end());
  local_ = make_local(std::move(shard));
  DPT_ASSERT(local_ && local_->param_groups().size() == groups.size(),
             "the local optimizer must keep the groups it is given, one for each of the ", groups.size());
}

// Zeroed, not dropped (LibTorch 2's Optimizer::zero_grad drops them): DistributedDataParallel's
// reducer keeps the gradients as views of its buckets.
void ZeroRedundancyOptimizer::zero_grad() {
  for (auto& group : params_) {
    for (auto& p : group) {
      if (p.grad().defined()) {
        p.mutable_grad().detach_();
        p.mutable_grad().zero_();
      }
    }
  }
}

void ZeroRedundancyOptimizer::step() {
  local_->step();
  const int world = comm_->size();
  if (world == 1 || gather_width_ == 0) return;
  // Every rank's shard in one buffer of the largest shard's size, its parameters in group order.
  at::Tensor mine = at::zeros({gather_width_}, buffer_options_);
  torch::NoGradGuard no_grad;
  int64_t offset = 0;
  for (size_t g = 0; g < params_.size(); ++g) {
    for (size_t i = 0; i < params_[g].size(); ++i) {
      if (owners_[g][i] != comm_->rank()) continue;
      const int64_t n = params_[g][i].numel();
      mine.narrow(0, offset, n).copy_(params_[g][i].reshape({-1}));
      offset += n;
    }
  }
  const std::vector<at::Tensor> shards = comm_->all_gather(mine);
  std::vector<int64_t> read(world, 0);
  for (size_t g = 0; g < params_.size(); ++g) {
    for (size_t i = 0; i < params_[g].size(); ++i) {
      const int rank = owners_[g][i];
      at::Tensor& p = params_[g][i];
      const int64_t n = p.numel();
      if (rank != comm_->rank()) p.copy_(shards[rank].narrow(0, read[rank], n).view(p.sizes()));
      read[rank] += n;
    }
  }
}

}  // namespace dpt
