#include "dptrain/parallel/sharded_optimizer.h"

#include "dptrain/common/error.h"
#include "dptrain/parallel/zero.h"
#include "dptrain/parallel/zero_stage2.h"
#include "shard_gather.h"

namespace dpt {

ShardedOptimizer::Shard::Shard(const dist::Communicator& comm, std::vector<torch::optim::OptimizerParamGroup> groups_,
                               const char* kind)
    : groups(std::move(groups_)), given(compat::clone_group_options(groups)), parts_by_rank(comm.size()) {
  detail::check_gatherable(groups, comm.rank(), kind);
}

void ShardedOptimizer::Shard::make_local_optimizer(std::vector<std::vector<at::Tensor>> local_groups,
                                                   const LocalOptimizerFactory& make_local) {
  std::vector<torch::optim::OptimizerParamGroup> shard;
  for (size_t g = 0; g < groups.size(); ++g) {
    shard.emplace_back(std::move(local_groups.at(g)));
    if (groups[g].has_options()) shard.back().set_options(groups[g].options().clone());
  }
  local = make_local(std::move(shard));
  DPT_ASSERT(local && local->param_groups().size() == groups.size(),
             "the local optimizer must keep the groups it is given, one for each of the ", groups.size());
}

ShardedOptimizer::ShardedOptimizer(std::shared_ptr<dist::Communicator> comm, Shard shard, const char* kind)
    : torch::optim::Optimizer(std::move(shard.groups), shard.local->defaults().clone()),
      comm_(std::move(comm)),
      local_parts_(std::move(shard.local_parts)),
      parts_by_rank_(std::move(shard.parts_by_rank)),
      local_(std::move(shard.local)),
      kind_(kind) {
  compat::restore_group_options(*this, std::move(shard.given));
}

at::Tensor ShardedOptimizer::step(LossClosure closure) {
  DPT_CHECK(!closure, ConfigError, "rank ", comm_->rank(), ": ", kind_,
            "::step takes no closure (each rank steps its own parts)");
  detail::step_shard(param_groups(), *local_);
  detail::gather_shards(*comm_, parts_by_rank_);
  return {};
}

void ShardedOptimizer::save(torch::serialize::OutputArchive& /*archive*/) const {
  detail::refuse_archive(comm_->rank(), kind_, /*saving=*/true);
}

void ShardedOptimizer::load(torch::serialize::InputArchive& /*archive*/) {
  detail::refuse_archive(comm_->rank(), kind_, /*saving=*/false);
}

int64_t ShardedOptimizer::local_numel() const {
  int64_t n = 0;
  for (const auto& part : local_parts_) n += part.length;
  return n;
}

std::shared_ptr<ShardedOptimizer> make_sharded_optimizer(int stage, std::shared_ptr<dist::Communicator> comm,
                                                         std::vector<torch::optim::OptimizerParamGroup> groups,
                                                         const ShardedOptimizer::LocalOptimizerFactory& make_local,
                                                         const Reducer* reducer) {
  switch (stage) {
    case 1:
      return std::make_shared<ZeroRedundancyOptimizer>(std::move(comm), std::move(groups), make_local);
    case 2:
      DPT_CHECK(reducer != nullptr, ConfigError, "rank ", comm->rank(),
                ": ZeRO-2 steps the parts of the gradients a reducer keeps: give make_sharded_optimizer "
                "DistributedDataParallel's, built with ReducerOptions::shard_gradients");
      return std::make_shared<ZeroStage2Optimizer>(std::move(comm), *reducer, std::move(groups), make_local);
  }
  throw ConfigError(str("ZeRO has stages 1 (optimizer state sharded) and 2 (and the reduced gradients), not ",
                        stage));
}

}  // namespace dpt
