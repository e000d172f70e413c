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

// What the constructor works out before its base class can be built: the base takes the local
// optimizer's defaults, so the local optimizer comes first.
struct ZeroRedundancyOptimizer::Sharding {
  Sharding(std::shared_ptr<dist::Communicator> comm, std::vector<torch::optim::OptimizerParamGroup> groups,
           const LocalOptimizerFactory& make_local);

  std::shared_ptr<dist::Communicator> comm;
  std::vector<torch::optim::OptimizerParamGroup> groups;
  std::vector<std::vector<int>> owners;
  std::vector<int64_t> shard_numel;  // by rank
  at::TensorOptions buffer_options;
  std::shared_ptr<torch::optim::Optimizer> local;
};

ZeroRedundancyOptimizer::Sharding::Sharding(std::shared_ptr<dist::Communicator> comm_,
                                            std::vector<torch::optim::OptimizerParamGroup> groups_,
                                            const LocalOptimizerFactory& make_local)
    : comm(std::move(comm_)), groups(std::move(groups_)), shard_numel(comm->size(), 0) {
  std::vector<std::vector<int64_t>> numels;
  std::optional<at::TensorOptions> kind;
  for (const auto& group : groups) {
    numels.emplace_back();
    for (const auto& p : group.params()) {
      numels.back().push_back(p.numel());
      if (!kind) kind = p.options();
      DPT_CHECK(p.is_non_overlapping_and_dense(), ConfigError, "rank ", comm->rank(), ": ZeroRedundancyOptimizer "
                "gathers parameters as flat memory; a parameter of shape ", p.sizes(), " and strides ", p.strides(),
                " is not dense");
      DPT_CHECK(p.dtype() == kind->dtype() && p.device() == kind->device(), ConfigError, "rank ", comm->rank(),
                ": ZeroRedundancyOptimizer gathers the shards in one buffer, so every parameter needs one dtype "
                "and device; found ", kind->dtype(), " on ", kind->device(), " and ", p.dtype(), " on ", p.device());
    }
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
  if (kind) buffer_options = *kind;
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
      buffer_options_(sharding.buffer_options),
      gather_width_(*std::max_element(shard_numel_.begin(), shard_numel_.end())),
      local_(std::move(sharding.local)) {}

void ZeroRedundancyOptimizer::save(torch::serialize::OutputArchive& /*archive*/) const {
  throw ConfigError(str("rank ", comm_->rank(), ": a ZeroRedundancyOptimizer holds only its rank's shard of the "
                        "state; gather it with dpt::train::consolidated_optimizer_state_dict instead of saving it"));
}

void ZeroRedundancyOptimizer::load(torch::serialize::InputArchive& /*archive*/) {
  throw ConfigError(str("rank ", comm_->rank(), ": a ZeroRedundancyOptimizer loads the whole optimizer's state "
                        "dict (dpt::train::load_optimizer_state_dict), not an archive"));
}

at::Tensor ZeroRedundancyOptimizer::step(LossClosure closure) {
  DPT_CHECK(!closure, ConfigError, "rank ", comm_->rank(),
            ": ZeroRedundancyOptimizer::step takes no closure (each rank steps its own shard)");
  auto& local_groups = local_->param_groups();
  for (size_t g = 0; g < local_groups.size(); ++g) local_groups[g].set_options(param_groups()[g].options().clone());
  local_->step();
  if (comm_->size() > 1) gather_shards();
  return {};
}

namespace {

// A dense tensor's elements in memory order, as one flat tensor sharing its storage: a
// channels_last weight is laid out alike on every rank, so its memory order travels as is.
at::Tensor flat_storage(const at::Tensor& t) {
  return at::empty({0}, t.options()).set_(t.storage(), t.storage_offset(), {t.numel()}, {1});
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

// Rank r's parameters, laid end to end in group order, travel in pieces of at most kGatherPiece
// elements a rank: one all_gather a piece, so the buffers in flight are (world + 1) pieces, not
// (world + 1) shards, which at 4 ranks would outweigh the optimizer state saved.
void ZeroRedundancyOptimizer::gather_shards() {
  torch::NoGradGuard no_grad;
  const int world = comm_->size();
  std::vector<std::vector<at::Tensor>> flats(world);
  for (size_t g = 0; g < owners_.size(); ++g) {
    const auto& params = param_groups()[g].params();
    for (size_t i = 0; i < params.size(); ++i) flats[owners_[g][i]].push_back(flat_storage(params[i]));
  }
  const int64_t piece = std::min(gather_width_, kGatherPiece);
  at::Tensor mine = at::zeros({piece}, buffer_options_);
  for (int64_t from = 0; from < gather_width_; from += piece) {
    for_each_run(flats[comm_->rank()], from, piece, [&](const at::Tensor& flat, int64_t at, int64_t into, int64_t n) {
      mine.narrow(0, into, n).copy_(flat.narrow(0, at, n));
    });
    const dist::CollectiveLabel label(str("ZeRO shards, elements ", from, " of ", gather_width_));
    const std::vector<at::Tensor> pieces = comm_->all_gather(mine);
    for (int rank = 0; rank < world; ++rank) {
      if (rank == comm_->rank()) continue;
      for_each_run(flats[rank], from, piece, [&](const at::Tensor& flat, int64_t at, int64_t into, int64_t n) {
        flat.narrow(0, at, n).copy_(pieces[rank].narrow(0, into, n));
      });
    }
  }
}

}  // namespace dpt
