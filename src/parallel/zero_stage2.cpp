#include "dptrain/parallel/zero_stage2.h"

#include <algorithm>
#include <cmath>
#include <unordered_map>
#include <utility>

#include <torch/csrc/autograd/grad_mode.h>

#include "dptrain/common/error.h"
#include "dptrain/compat/compat.h"
#include "shard_gather.h"

namespace dpt {

namespace {

// Rank r's part of bucket b is its elements [r x n, (r + 1) x n), n = the bucket's shard size,
// of the bucket's parameters laid end to end: each parameter overlapping it gives a part, a tensor
// of its own over the parameter's memory, whose gradient is the matching elements of the shard.
void cut_parts(const dist::Communicator& comm, const Reducer& reducer, ShardedOptimizer::Shard& shard,
               std::vector<std::vector<at::Tensor>>& local_groups) {
  struct Place {
    int64_t index;
    size_t group;
  };
  std::unordered_map<const void*, Place> place_of;
  int64_t index = 0;
  for (size_t g = 0; g < shard.groups.size(); ++g) {
    for (const auto& p : shard.groups[g].params()) place_of[p.unsafeGetTensorImpl()] = {index++, g};
  }
  DPT_CHECK(static_cast<size_t>(index) == reducer.parameters().size(), ConfigError, "rank ", comm.rank(),
            ": ZeroStage2Optimizer's groups hold ", index, " parameters, its reducer ", reducer.parameters().size(),
            "; pass the parameters DistributedDataParallel reduces");
  const int world = comm.size(), me = comm.rank();
  std::vector<std::vector<ShardPart>> parts_by_group(shard.groups.size());
  const auto& buckets = reducer.bucket_indices();
  for (size_t b = 0; b < buckets.size(); ++b) {
    const at::Tensor& gradients = reducer.gradient_shard(b);
    DPT_CHECK(gradients.defined(), ConfigError, "rank ", me, ": ZeroStage2Optimizer needs a reducer built with "
              "ReducerOptions::shard_gradients");
    const int64_t n = gradients.numel();
    int64_t offset = 0;  // of the parameter in the bucket
    for (size_t i : buckets[b]) {
      const at::Tensor& param = reducer.parameters()[i].tensor;
      const auto found = place_of.find(param.unsafeGetTensorImpl());
      DPT_CHECK(found != place_of.end(), ConfigError, "rank ", me, ": parameter '", reducer.parameters()[i].name,
                "' of the reducer is in none of ZeroStage2Optimizer's groups");
      const int64_t numel = param.numel();
      for (int r = 0; r < world; ++r) {
        const int64_t lo = std::max(offset, r * n), hi = std::min(offset + numel, (r + 1) * n);
        if (lo >= hi) continue;
        at::Tensor part = detail::flat_slice(param, lo - offset, hi - lo);
        shard.parts_by_rank[r].push_back(part);
        if (r != me) continue;
        part.mutable_grad() = detail::flat_slice(gradients, lo - r * n, hi - lo);
        local_groups[found->second.group].push_back(part);
        parts_by_group[found->second.group].push_back({found->second.index, lo - offset, hi - lo});
      }
      offset += numel;
    }
  }
  // The local optimizer numbers its parameters group after group.
  for (const auto& parts : parts_by_group) {
    shard.local_parts.insert(shard.local_parts.end(), parts.begin(), parts.end());
  }
}

}  // namespace

ZeroStage2Optimizer::ZeroStage2Optimizer(std::shared_ptr<dist::Communicator> comm, const Reducer& reducer,
                                         std::vector<torch::optim::OptimizerParamGroup> groups,
                                         const LocalOptimizerFactory& make_local)
    : ShardedOptimizer(
          comm,
          [&] {
            Shard shard(*comm, std::move(groups), "ZeroStage2Optimizer");
            std::vector<std::vector<at::Tensor>> mine(shard.groups.size());
            cut_parts(*comm, reducer, shard, mine);
            shard.make_local_optimizer(std::move(mine), make_local);
            return shard;
          }(),
          "ZeroStage2Optimizer") {}

double ZeroStage2Optimizer::clip_grad_norm(double max_norm) {
  torch::NoGradGuard no_grad;
  at::Tensor squares = at::zeros({1}, at::kDouble);
  for (const auto& group : local_optimizer().param_groups()) {
    for (const auto& part : group.params()) squares += part.grad().to(at::kDouble).square().sum().cpu();
  }
  squares = squares.to(communicator().device());
  communicator().all_reduce(squares, dist::ReduceOp::Sum);
  const double norm = std::sqrt(squares.cpu().item<double>());
  const double scale = max_norm / (norm + 1e-6);
  if (scale < 1) {
    for (auto& group : local_optimizer().param_groups()) {
      for (auto& part : group.params()) part.mutable_grad().mul_(scale);
    }
  }
  return norm;
}

}  // namespace dpt
