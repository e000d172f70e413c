#include "dptrain/data/sampler.h"

#include <algorithm>

#include <ATen/ATen.h>
#include <ATen/CPUGeneratorImpl.h>

#include "dptrain/common/error.h"

namespace dpt::data {

namespace {

void check_shard(int64_t dataset_size, int64_t world_size, int64_t rank) {
  DPT_CHECK(dataset_size >= 0, ConfigError, "sampler: dataset size must not be negative, got ", dataset_size);
  DPT_CHECK(world_size > 0, ConfigError, "sampler: world size must be positive, got ", world_size);
  DPT_CHECK(rank >= 0 && rank < world_size, ConfigError, "sampler: rank ", rank, " is outside [0, ", world_size, ")");
}

int64_t ceil_div(int64_t a, int64_t b) { return (a + b - 1) / b; }

}  // namespace

std::vector<int64_t> seeded_permutation(int64_t n, uint64_t seed) {
  at::Generator generator = at::detail::createCPUGenerator(seed);
  at::Tensor perm = at::randperm(n, generator, at::TensorOptions().dtype(at::kLong));
  const int64_t* data = perm.data_ptr<int64_t>();
  return std::vector<int64_t>(data, data + n);
}

DistributedSampler::DistributedSampler(int64_t dataset_size, SamplerOptions options)
    : dataset_size_(dataset_size), options_(options) {
  check_shard(dataset_size, options.world_size(), options.rank());
  const int64_t world = options.world_size();
  DPT_CHECK(options.repetitions() >= 1, ConfigError, "sampler: repetitions must be at least 1, got ",
            options.repetitions());
  if (!options.shard_sizes().empty()) {
    int64_t total = 0;
    for (int64_t size : options.shard_sizes()) {
      DPT_CHECK(size >= 0, ConfigError, "sampler: a shard's size must not be negative, got ", size);
      total += size;
    }
    DPT_CHECK(total == dataset_size, ConfigError, "sampler: the shards hold ", total, " samples, the dataset ",
              dataset_size);
    DPT_CHECK(options.open_shards() >= 0, ConfigError, "sampler: open shards must not be negative, got ",
              options.open_shards());
  }
  if (options.repetitions() > 1) {
    // RASampler keeps whole multiples of 256 samples per epoch, split over the ranks.
    num_samples_ = dataset_size / 256 * 256 / world;
    DPT_CHECK(num_samples_ > 0, ConfigError, "sampler: repeated augmentation keeps floor(n / 256) * 256 / world "
              "samples per rank and epoch, none of ", dataset_size, " samples over ", world, " ranks; use a larger "
              "dataset or leave out --ra-sampler");
    return;
  }
  // PyTorch: with drop_last the shard is ceil((n - world) / world), i.e. floor(n / world).
  num_samples_ =
      options.drop_last() && dataset_size % world != 0 ? dataset_size / world : ceil_div(dataset_size, world);
}

namespace {

// The shard-aware permutation SamplerOptions::shard_sizes describes. Group g's samples are permuted
// from a seed of its own, derived from the epoch's seed and g by an odd multiplier (Weyl sequence),
// so no two groups of one epoch, nor the same group in nearby epochs, share a permutation.
std::vector<int64_t> shard_aware_order(const std::vector<int64_t>& shard_sizes, int64_t open_shards, uint64_t seed) {
  std::vector<int64_t> starts{0};
  for (int64_t size : shard_sizes) starts.push_back(starts.back() + size);
  const std::vector<int64_t> shards = seeded_permutation(static_cast<int64_t>(shard_sizes.size()), seed);
  std::vector<int64_t> order;
  order.reserve(static_cast<size_t>(starts.back()));
  for (size_t first = 0, group = 0; first < shards.size(); first += static_cast<size_t>(open_shards), ++group) {
    std::vector<int64_t> members;
    for (size_t s = first; s < std::min(shards.size(), first + static_cast<size_t>(open_shards)); ++s) {
      for (int64_t i = starts[shards[s]]; i < starts[shards[s] + 1]; ++i) members.push_back(i);
    }
    const uint64_t group_seed = seed * 0x9E3779B97F4A7C15ULL + group + 1;
    for (int64_t position : seeded_permutation(static_cast<int64_t>(members.size()), group_seed)) {
      order.push_back(members[position]);
    }
  }
  return order;
}

}  // namespace

std::vector<int64_t> DistributedSampler::epoch_order() const {
  std::vector<int64_t> order;
  if (options_.shuffle() && !options_.shard_sizes().empty() && options_.open_shards() > 0) {
    order = shard_aware_order(options_.shard_sizes(), options_.open_shards(),
                              options_.seed() + static_cast<uint64_t>(epoch_));
  } else if (options_.shuffle()) {
    order = seeded_permutation(dataset_size_, options_.seed() + static_cast<uint64_t>(epoch_));
  } else {
    order.resize(dataset_size_);
    for (int64_t i = 0; i < dataset_size_; ++i) order[i] = i;
  }
  const int64_t reps = options_.repetitions();
  if (reps == 1) return order;
  // Each index `reps` times in a row, as copies 0 to reps - 1; RASampler's padding never reaches
  // the num_samples() * world positions kept.
  std::vector<int64_t> repeated;
  repeated.reserve(num_samples_ * options_.world_size());
  for (int64_t position = 0; position < num_samples_ * options_.world_size(); ++position) {
    repeated.push_back(draw_number({order[position / reps], position % reps}, dataset_size_));
  }
  return repeated;
}

std::vector<int64_t> DistributedSampler::indices_from(int64_t consumed) const {
  DPT_CHECK(consumed >= 0, ConfigError, "sampler: samples already consumed must not be negative, got ", consumed);
  const std::vector<int64_t> all = epoch_order();
  const int64_t world = options_.world_size();
  const int64_t size = static_cast<int64_t>(all.size());
  std::vector<int64_t> rest(all.begin() + std::min(consumed, size), all.end());
  const int64_t left = static_cast<int64_t>(rest.size());
  // PyTorch's rule for the whole epoch, applied to what is left: pad to a multiple of the world
  // by cycling through the permutation from its start, or with drop_last truncate to one.
  const int64_t total = options_.drop_last() ? left / world * world : ceil_div(left, world) * world;
  rest.resize(std::min(left, total));
  for (int64_t i = 0; static_cast<int64_t>(rest.size()) < total; ++i) rest.push_back(all[i % size]);
  std::vector<int64_t> mine;
  mine.reserve(total / world);
  for (int64_t i = options_.rank(); i < total; i += world) mine.push_back(rest[i]);
  return mine;
}

void DistributedSampler::load_state(const SamplerState& state) {
  options_.seed(state.seed);
  epoch_ = state.epoch;
}

void DistributedSampler::save(torch::serialize::OutputArchive& archive) const {
  archive.write("seed", at::scalar_tensor(static_cast<int64_t>(options_.seed()), at::kLong));
  archive.write("epoch", at::scalar_tensor(epoch_, at::kLong));
}

void DistributedSampler::load(torch::serialize::InputArchive& archive) {
  at::Tensor seed, epoch;
  archive.read("seed", seed);
  archive.read("epoch", epoch);
  load_state({static_cast<uint64_t>(seed.item<int64_t>()), epoch.item<int64_t>()});
}

EvalSampler::EvalSampler(int64_t dataset_size, int64_t world_size, int64_t rank)
    : dataset_size_(dataset_size), world_size_(world_size), rank_(rank) {
  check_shard(dataset_size, world_size, rank);
}

std::vector<int64_t> EvalSampler::indices() const {
  std::vector<int64_t> mine;
  mine.reserve(num_samples());
  for (int64_t i = rank_; i < dataset_size_; i += world_size_) mine.push_back(i);
  return mine;
}

int64_t EvalSampler::num_samples() const {
  return dataset_size_ > rank_ ? ceil_div(dataset_size_ - rank_, world_size_) : 0;
}

}  // namespace dpt::data
