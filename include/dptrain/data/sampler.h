#pragma once
// Which sample indices each rank reads, with the semantics of PyTorch's
// torch.utils.data.DistributedSampler (same permutation for the same seed and epoch, same padding,
// same strided shard), and an evaluation sampler that reads every sample exactly once.
//
//   dpt::data::DistributedSampler sampler(dataset.size(),
//       dpt::data::SamplerOptions(comm->size(), comm->rank()).seed(42));
//   for (int64_t epoch = 0; epoch < epochs; ++epoch) {
//     sampler.set_epoch(epoch);
//     for (int64_t index : sampler.indices()) { ... }
//   }

#include <torch/arg.h>
#include <torch/serialize/archive.h>

#include <algorithm>
#include <cstdint>
#include <vector>

namespace dpt::data {

struct SamplerOptions {
  SamplerOptions(int64_t world_size, int64_t rank) : world_size_(world_size), rank_(rank) {}
  // Number of ranks sharing the dataset.
  TORCH_ARG(int64_t, world_size);
  // This rank, in [0, world_size).
  TORCH_ARG(int64_t, rank);
  // Permute the indices each epoch (from seed + epoch) instead of reading them in order.
  TORCH_ARG(bool, shuffle) = true;
  // Base seed; every rank must use the same one so that the shards do not overlap.
  TORCH_ARG(uint64_t, seed) = 0;
  // Drop the tail that does not divide evenly instead of padding with repeated indices.
  TORCH_ARG(bool, drop_last) = false;
  // Repeated augmentation (torchvision's RASampler, --ra-sampler --ra-reps): above 1, every index
  // of the permutation is repeated this many times in a row before sharding, so that the copies
  // of a sample land on neighbouring ranks, and each rank keeps floor(n / 256) * 256 / world_size
  // of its share. Copy k of sample i is handed out as the draw i + k * dataset_size (see
  // draw_sample), which the loader augments apart from the other copies.
  TORCH_ARG(int64_t, repetitions) = 1;
  // A shard-aware shuffle for a dataset kept in shards (ShardSet::shard_sizes(), which must sum to
  // the dataset's size): the epoch's order permutes the shards, takes them `open_shards` at a time
  // in that order, and permutes the samples of each such group among themselves. Every rank then
  // reads from at most `open_shards` shards at a time (the same ones: a machine's ranks share what
  // is read), and a batch mixes that many shards. Like the plain permutation it is a function of
  // (seed, epoch) alone, the same over every world size, so a resume at another world size goes on
  // in the same order. Empty, or open_shards 0: PyTorch's permutation of all samples.
  TORCH_ARG(std::vector<int64_t>, shard_sizes);
  TORCH_ARG(int64_t, open_shards) = 8;
};

// A sampler's draw names a sample and which of its repeated copies this is, numbered
// index + copy * dataset_size.
struct SampleDraw {
  int64_t index = 0;
  int64_t copy = 0;
};
inline int64_t draw_number(SampleDraw draw, int64_t dataset_size) { return draw.index + draw.copy * dataset_size; }
inline SampleDraw draw_sample(int64_t draw, int64_t dataset_size) {
  return {draw % dataset_size, draw / dataset_size};
}

// What a sampler must save for an exact resume.
struct SamplerState {
  uint64_t seed = 0;
  int64_t epoch = 0;
};

// Training sampler: every rank gets num_samples() indices, the same count on every rank.
// Without drop_last the permutation is padded by repeating its own start until it divides by
// world_size; with drop_last it is truncated. Rank r takes positions r, r + world, r + 2 world, ...
// With repetitions > 1 the positions are those of the repeated permutation, and the indices are
// draws (SampleDraw).
class DistributedSampler {
 public:
  DistributedSampler(int64_t dataset_size, SamplerOptions options);

  // The permutation depends on seed + epoch; call this before each epoch.
  void set_epoch(int64_t epoch) { epoch_ = epoch; }
  int64_t epoch() const { return epoch_; }

  // This rank's indices for the current epoch.
  std::vector<int64_t> indices() const { return indices_from(0); }
  // This rank's share of the rest of the current epoch once its first `consumed` samples (in the
  // epoch's shuffled order, over all ranks) are done: that order from position `consumed` on,
  // padded or truncated as indices() is, and sharded among the current world. When `consumed` is
  // a multiple of the world size this is indices() without its first consumed / world_size
  // entries; otherwise (a run resumed mid-epoch at another world size) it re-shards what is left.
  std::vector<int64_t> indices_from(int64_t consumed) const;
  int64_t num_samples() const { return num_samples_; }
  int64_t total_size() const { return num_samples_ * options_.world_size(); }
  // The positions of the epoch's order that an epoch trains, its padding left out: where the
  // samples consumed stop, the last step being short or padded (indices_from(epoch_length()) is
  // empty).
  int64_t epoch_length() const { return std::min(dataset_size_, total_size()); }
  const SamplerOptions& options() const { return options_; }

  SamplerState state() const { return {options_.seed(), epoch_}; }
  void load_state(const SamplerState& state);
  void save(torch::serialize::OutputArchive& archive) const;
  void load(torch::serialize::InputArchive& archive);

 private:
  // The epoch's samples in order over all ranks, before padding: the permutation, or with
  // repetitions its repeated draws, cut to what the ranks keep.
  std::vector<int64_t> epoch_order() const;

  int64_t dataset_size_;
  SamplerOptions options_;
  int64_t epoch_ = 0;
  int64_t num_samples_;
};

// Evaluation sampler: no padding and no shuffling, so every sample is counted exactly once across
// ranks. The shard is strided like DistributedSampler's (rank r reads r, r + world, ...), so the
// first ranks may get one index more than the last ones.
class EvalSampler {
 public:
  EvalSampler(int64_t dataset_size, int64_t world_size, int64_t rank);
  std::vector<int64_t> indices() const;
  int64_t num_samples() const;

 private:
  int64_t dataset_size_;
  int64_t world_size_;
  int64_t rank_;
};

// The permutation torch.randperm(n, generator=torch.Generator().manual_seed(seed)) returns.
std::vector<int64_t> seeded_permutation(int64_t n, uint64_t seed);

}  // namespace dpt::data
