#pragma once
// A dataset kept as tar shards (WebDataset's format): samples are read with one positioned read
// each from the shard that holds them, through the shard's index. A shard set is named by
//   - its manifest (`OUT/train/manifest.json`, written by `dptrain make-shards`),
//   - a folder: its manifest.json, else every .tar in it in name order,
//   - WebDataset's brace notation, `shards/train-{000000..000146}.tar`,
//   - one .tar file,
// each also as an http(s):// or s3:// URL (remote_store.h; a remote folder is its manifest.json).
// A remote set's indexes are fetched when it opens (or, for a shard without one, the shard, to be
// scanned); its shards are fetched whole into a bounded cache shared by the machine's processes
// (shard_cache.h), ahead of the loader in the order it will read them.
// Without a manifest (shards of webdataset's ShardWriter or of `tar`), the classes are the labels'
// numbers, "0" to the largest label. Sample i is the i-th sample of the shards in order: with
// `make-shards --order folder`, image i of the ImageFolder it was written from, with the same
// label, bytes and augmentation.
//
//   auto train = std::make_shared<dpt::data::ShardSet>("/data/imagenet-shards/train", transform);
//   sampler_options.shard_sizes(train->shard_sizes()).open_shards(4);

#include <cstdint>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <vector>

#include "dptrain/data/dataset.h"
#include "dptrain/data/shard_cache.h"
#include "dptrain/data/shard_index.h"
#include "dptrain/data/transform.h"

namespace dpt::data {

// Whether `path` names a shard set rather than an image folder: a manifest, a .tar, a brace
// pattern, or a folder holding a manifest.json or .tar files.
bool is_shard_set(const std::string& path);

// The names WebDataset's brace notation stands for: "a-{00..02}.tar" -> a-00.tar, a-01.tar,
// a-02.tar (numbers keep the first bound's width); "{a,b}" lists alternatives; several braces
// multiply. ConfigError for an unbalanced or empty brace or a range of more than 10 million.
std::vector<std::string> expand_braces(const std::string& pattern);

class ShardPrefetcher;

class ShardSet : public Dataset {
 public:
  // Reads the manifest (if any) and every shard's index, building those missing from a scan of
  // the shard. Throws DataError naming the shard for a missing or unreadable shard, one whose
  // size differs from the manifest's, or a set without samples; bad samples as index_shard says.
  // `cache`: where a remote set's shards go and how they are fetched (default: ShardCacheOptions()'s).
  ShardSet(const std::string& spec, Transform transform, BadImagePolicy policy = BadImagePolicy::Error,
           std::optional<ShardCacheOptions> cache = std::nullopt);
  ~ShardSet() override;

  int64_t size() const override { return starts_.back(); }
  int64_t num_classes() const override { return static_cast<int64_t>(classes_.size()); }
  std::vector<int64_t> sample_shape() const override { return transform_.sample_shape(); }
  int64_t get(int64_t index, int64_t epoch, float* out) const override;
  // "<shard path>#<key>.<extension>"
  std::string describe(int64_t index) const override;
  // A remote set fetches the shards of the epoch being read in their order, and once those are
  // fetched the first shards of the epoch said after it, within the same bound (the local one:
  // nothing).
  void will_read(int64_t epoch, const std::vector<int64_t>& indices) const override;
  void starts_reading(int64_t epoch) const override;

  const std::vector<std::string>& classes() const { return classes_; }
  int64_t label(int64_t index) const;
  // The encoded image of sample `index`, as stored.
  std::vector<uint8_t> image_bytes(int64_t index) const;
  // Samples per shard, in order: what a shard-aware sampler needs.
  std::vector<int64_t> shard_sizes() const;
  // The memory its shards' indexes hold: about 40 bytes a sample (ImageNet's 1.28 M: some 52 MB).
  int64_t index_bytes() const;
  // Each shard's path or URL, in order.
  const std::vector<std::string>& shard_paths() const { return paths_; }
  // Where a remote set's shards are fetched to, and how (null for a set on local paths).
  const ShardCache* cache() const { return cache_.get(); }
  // Samples left out under BadImagePolicy::Skip, one line each.
  const std::vector<std::string>& warnings() const { return warnings_; }

 private:
  // (shard, sample in it) of a sample of the set.
  std::pair<size_t, size_t> locate(int64_t index) const;

  // Where shard `shard`'s bytes can be read now: its path, or its copy in the cache.
  std::string readable_path(size_t shard) const;
  // Sample `sample` of shard `shard`: its encoded image, and its name in errors.
  std::vector<uint8_t> member_bytes(size_t shard, size_t sample) const;
  std::string member_name(size_t shard, size_t sample) const;
  // The shards in the order in which `indices` first read them.
  std::vector<size_t> shard_order(const std::vector<int64_t>& indices) const;

  Transform transform_;
  std::unique_ptr<ShardCache> cache_;  // for a remote set only
  std::vector<std::string> classes_;
  std::vector<std::string> paths_;
  std::vector<int64_t> archive_sizes_;
  std::vector<PackedShardIndex> indices_;
  std::vector<int64_t> starts_;  // first sample of each shard, and the total at the end
  std::vector<std::string> warnings_;
  mutable std::mutex prefetch_mutex_;  // over the three below
  mutable std::map<int64_t, std::vector<size_t>> said_;  // each epoch said and not yet read: its shard order
  mutable int64_t reading_epoch_ = -1;
  mutable std::unique_ptr<ShardPrefetcher> prefetcher_;  // the reading epoch's, then the next one's
};

}  // namespace dpt::data
