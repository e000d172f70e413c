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

// What the constructor works out before its base class can be built (the base takes the local
// optimizer's defaults): every rank's parts of the parameters, and the local optimizer over this
// rank's.
struct ZeroStage2Optimizer::Parts {
  Parts(std::shared_ptr<dist::Communicator> comm, const Reducer& reducer,
        std::vector<torch::optim::OptimizerParamGroup> groups, const LocalOptimizerFactory& make_local);

  std::shared_ptr<dist::Communicator> comm;
  std::vector<torch::optim::OptimizerParamGroup> groups;
  compat::GroupOptions given;  // the groups' options, which the base's constructor may merge
  std::vector<Segment> local_segments;
  std::vector<std::vector<at::Tensor>> by_rank;
  std::shared_ptr<torch::optim::Optimizer> local;
};

// Rank r's part of bucket b is its elements [r x n, (r + 1) x n), n = the bucket's shard size,
// of the bucket's parameters laid end to end: each parameter overlapping it gives a segment.
ZeroStage2Optimizer::Parts::Parts(std::shared_ptr<dist::Communicator> comm_, const Reducer& reducer,
                                  std::vector<torch::optim::OptimizerParamGroup> groups_,
                                  const LocalOptimizerFactory& make_local)
    : comm(std::move(comm_)), groups(std::move(groups_)), by_rank(comm->size()) {
  detail::check_gatherable(groups, comm->rank(), "ZeroStage2Optimizer");
  struct Place {
    int64_t index;
    size_t group;
  };
  std::unordered_map<const void*, Place> place_of;
  int64_t index = 0;
  for (size_t g = 0; g < groups.size(); ++g) {
    for (const auto& p : groups[g].params()) place_of[p.unsafeGetTensorImpl()] = {index++, g};
  }
  DPT_CHECK(static_cast<size_t>(index) == reducer.parameters().size(), ConfigError, "rank ", comm->rank(),
            ": ZeroStage2Optimizer's groups hold ", index, " parameters, its reducer ", reducer.parameters().size(),
            "; pass the parameters DistributedDataParallel reduces");
  const int world = comm->size(), me = comm->rank();
  std::vector<std::vector<at::Tensor>> local_groups(groups.size());
  std::vector<std::vector<Segment>> segments_by_group(groups.size());
  const auto& buckets = reducer.bucket_indices();
  for (size_t b = 0; b < buckets.size(); ++b) {
    const at::Tensor& shard = reducer.gradient_shard(b);
    DPT_CHECK(shard.defined(), ConfigError, "rank ", me, ": ZeroStage2Optimizer needs a reducer built with "
              "ReducerOptions::shard_gradients");
    const int64_t n = shard.numel();
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
        by_rank[r].push_back(part);
        if (r != me) continue;
        part.mutable_grad() = detail::flat_slice(shard, lo - r * n, hi - lo);
        local_groups[found->second.group].push_back(part);
        segments_by_group[found->second.group].push_back({found->second.index, lo - offset, hi - lo});
      }
      offset += numel;
    }
  }
  std::vector<torch::optim::OptimizerParamGroup> shard_groups;
  for (size_t g = 0; g < groups.size(); ++g) {
    shard_groups.emplace_back(std::move(local_groups[g]));
    if (groups[g].has_options()) shard_groups.back().set_options(groups[g].options().clone());
    local_segments.insert(local_segments.end(), segments_by_group[g].begin(), segments_by_group[g].end());
  }
  given = compat::clone_group_options(groups);
  local = make_local(std::move(shard_groups));
  DPT_ASSERT(local && local->param_groups().size() == groups.size(),
             "the local optimizer must keep the groups it is given, one for each of the ", groups.size());
}

ZeroStage2Optimizer::ZeroStage2Optimizer(std::shared_ptr<dist::Communicator> comm, const Reducer& reducer,
                                         std::vector<torch::optim::OptimizerParamGroup> groups,
                                         const LocalOptimizerFactory& make_local)
    : ZeroStage2Optimizer(Parts(std::move(comm), reducer, std::move(groups), make_local)) {}

ZeroStage2Optimizer::ZeroStage2Optimizer(Parts parts)
    : torch::optim::Optimizer(std::move(parts.groups), parts.local->defaults().clone()),
      comm_(std::move(parts.comm)),
      local_segments_(std::move(parts.local_segments)),
      parts_by_rank_(std::move(parts.by_rank)),
      local_(std::move(parts.local)) {
  compat::restore_group_options(*this, std::move(parts.given));
}

at::Tensor ZeroStage2Optimizer::step(LossClosure closure) {
  DPT_CHECK(!closure, ConfigError, "rank ", comm_->rank(),
            ": ZeroStage2Optimizer::step takes no closure (each rank steps its own parts)");
  detail::step_shard(param_groups(), *local_);
  detail::gather_shards(*comm_, parts_by_rank_);
  return {};
}

double ZeroStage2Optimizer::clip_grad_norm(double max_norm) {
  torch::NoGradGuard no_grad;
  at::Tensor squares = at::zeros({1}, at::kDouble);
  for (const auto& group : local_->param_groups()) {
    for (const auto& part : group.params()) squares += part.grad().to(at::kDouble).square().sum().cpu();
  }
  squares = squares.to(comm_->device());
  comm_->all_reduce(squares, dist::ReduceOp::Sum);
  const double norm = std::sqrt(squares.cpu().item<double>());
  const double scale = max_norm / (norm + 1e-6);
  if (scale < 1) {
    for (auto& group : local_->param_groups()) {
      for (auto& part : group.params()) part.mutable_grad().mul_(scale);
    }
  }
  return norm;
}

void ZeroStage2Optimizer::save(torch::serialize::OutputArchive& /*archive*/) const {
  detail::refuse_archive(comm_->rank(), "ZeroStage2Optimizer", /*saving=*/true);
}

void ZeroStage2Optimizer::load(torch::serialize::InputArchive& /*archive*/) {
  detail::refuse_archive(comm_->rank(), "ZeroStage2Optimizer", /*saving=*/false);
}

int64_t ZeroStage2Optimizer::local_numel() const {
  int64_t n = 0;
  for (const auto& segment : local_segments_) n += segment.length;
  return n;
}

}  // namespace dpt
