#include "dptrain/parallel/zero.h"

#include <algorithm>
#include <numeric>

#include <torch/nn/utils/clip_grad.h>

#include "dptrain/common/error.h"
#include "dptrain/compat/compat.h"
#include "shard_gather.h"

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

namespace {

std::vector<std::vector<int64_t>> numels_of(const std::vector<torch::optim::OptimizerParamGroup>& groups) {
  std::vector<std::vector<int64_t>> numels;
  for (const auto& group : groups) {
    numels.emplace_back();
    for (const auto& p : group.params()) numels.back().push_back(p.numel());
  }
  return numels;
}

}  // namespace

ZeroRedundancyOptimizer::ZeroRedundancyOptimizer(std::shared_ptr<dist::Communicator> comm,
                                                 std::vector<torch::optim::OptimizerParamGroup> groups,
                                                 const LocalOptimizerFactory& make_local)
    : ZeroRedundancyOptimizer(comm, assign_shards(numels_of(groups), comm->size()), std::move(groups), make_local) {}

// Each parameter is a part of its own, whole, stepped by its owner.
ZeroRedundancyOptimizer::ZeroRedundancyOptimizer(std::shared_ptr<dist::Communicator> comm,
                                                 std::vector<std::vector<int>> owners,
                                                 std::vector<torch::optim::OptimizerParamGroup>&& groups,
                                                 const LocalOptimizerFactory& make_local)
    : ShardedOptimizer(
          comm,
          [&] {
            Shard shard(*comm, std::move(groups), "ZeroRedundancyOptimizer");
            std::vector<std::vector<at::Tensor>> mine(shard.groups.size());
            int64_t index = 0;
            for (size_t g = 0; g < shard.groups.size(); ++g) {
              for (size_t i = 0; i < shard.groups[g].params().size(); ++i, ++index) {
                const at::Tensor& param = shard.groups[g].params()[i];
                shard.parts_by_rank[owners[g][i]].push_back(detail::flat_storage(param));
                if (owners[g][i] != comm->rank()) continue;
                mine[g].push_back(param);
                shard.local_parts.push_back({index, 0, param.numel()});
              }
            }
            shard.make_local_optimizer(std::move(mine), make_local);
            return shard;
          }(),
          "ZeroRedundancyOptimizer"),
      owners_(std::move(owners)) {}

double ZeroRedundancyOptimizer::clip_grad_norm(double max_norm) {
  std::vector<at::Tensor> params;
  for (const auto& group : param_groups()) params.insert(params.end(), group.params().begin(), group.params().end());
  return torch::nn::utils::clip_grad_norm_(params, max_norm);
}

}  // namespace dpt
