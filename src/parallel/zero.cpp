#include "dptrain/parallel/zero.h"

#include <algorithm>
#include <numeric>

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

// What the constructor works out before its base class can be built: the base takes the local
// optimizer's defaults, so the local optimizer comes first.
struct ZeroRedundancyOptimizer::Sharding {
  Sharding(std::shared_ptr<dist::Communicator> comm, std::vector<torch::optim::OptimizerParamGroup> groups,
           const LocalOptimizerFactory& make_local);

  std::shared_ptr<dist::Communicator> comm;
  std::vector<torch::optim::OptimizerParamGroup> groups;
  compat::GroupOptions given;  // the groups' options, which the base's constructor may merge
  std::vector<std::vector<int>> owners;
  std::vector<int64_t> shard_numel;  // by rank
  std::shared_ptr<torch::optim::Optimizer> local;
};

ZeroRedundancyOptimizer::Sharding::Sharding(std::shared_ptr<dist::Communicator> comm_,
                                            std::vector<torch::optim::OptimizerParamGroup> groups_,
                                            const LocalOptimizerFactory& make_local)
    : comm(std::move(comm_)), groups(std::move(groups_)), shard_numel(comm->size(), 0) {
  detail::check_gatherable(groups, comm->rank(), "ZeroRedundancyOptimizer");
  std::vector<std::vector<int64_t>> numels;
  for (const auto& group : groups) {
    numels.emplace_back();
    for (const auto& p : group.params()) numels.back().push_back(p.numel());
  }
  owners = assign_shards(numels, comm->size());
  std::vector<torch::optim::OptimizerParamGroup> shard;
  for (size_t g = 0; g < groups.size(); ++g) {
    std::vector<at::Tensor> mine;
    const auto& params = groups[g].params();
    for (size_t i = 0; i < params.size(); ++i) {
      shard_numel[owners[g][i]] += params[i].numel();
      if (owners[g][i] == comm->rank()) mine.push_back(params[i]);
    }
    shard.emplace_back(std::move(mine));
    if (groups[g].has_options()) shard.back().set_options(groups[g].options().clone());
  }
  given = compat::clone_group_options(groups);
  local = make_local(std::move(shard));
  DPT_ASSERT(local && local->param_groups().size() == groups.size(),
             "the local optimizer must keep the groups it is given, one for each of the ", groups.size());
}

ZeroRedundancyOptimizer::ZeroRedundancyOptimizer(std::shared_ptr<dist::Communicator> comm,
                                                 std::vector<torch::optim::OptimizerParamGroup> groups,
                                                 const LocalOptimizerFactory& make_local)
    : ZeroRedundancyOptimizer(Sharding(std::move(comm), std::move(groups), make_local)) {}

ZeroRedundancyOptimizer::ZeroRedundancyOptimizer(Sharding sharding)
    : torch::optim::Optimizer(std::move(sharding.groups), sharding.local->defaults().clone()),
      comm_(std::move(sharding.comm)),
      owners_(std::move(sharding.owners)),
      shard_numel_(std::move(sharding.shard_numel)),
      local_(std::move(sharding.local)) {
  compat::restore_group_options(*this, std::move(sharding.given));
}

void ZeroRedundancyOptimizer::save(torch::serialize::OutputArchive& /*archive*/) const {
  detail::refuse_archive(comm_->rank(), "ZeroRedundancyOptimizer", /*saving=*/true);
}

void ZeroRedundancyOptimizer::load(torch::serialize::InputArchive& /*archive*/) {
  detail::refuse_archive(comm_->rank(), "ZeroRedundancyOptimizer", /*saving=*/false);
}

at::Tensor ZeroRedundancyOptimizer::step(LossClosure closure) {
  DPT_CHECK(!closure, ConfigError, "rank ", comm_->rank(),
            ": ZeroRedundancyOptimizer::step takes no closure (each rank steps its own shard)");
  detail::step_shard(param_groups(), *local_);
  if (comm_->size() > 1) gather_shards();
  return {};
}

void ZeroRedundancyOptimizer::gather_shards() {
  std::vector<std::vector<at::Tensor>> parts(comm_->size());
  for (size_t g = 0; g < owners_.size(); ++g) {
    const auto& params = param_groups()[g].params();
    for (size_t i = 0; i < params.size(); ++i) parts[owners_[g][i]].push_back(detail::flat_storage(params[i]));
  }
  detail::gather_shards(*comm_, parts);
}

}  // namespace dpt
