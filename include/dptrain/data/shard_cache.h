#pragma once
// A folder of whole shards fetched from a remote store (remote_store.h), bounded in size and
// shared by every process of a machine that names the same folder: each file is fetched once,
// under a lock that the others wait on, then read where it lies. To make room for a shard the
// least recently read files go first (each read refreshes its file's time); a fetch under way
// holds its shard's room until it ends, so fetches at once stay within the bound together. The
// room and partial file of a fetch whose process died (no one holds its shard's lock) are removed
// by the next process that makes room.
//
//   dpt::data::ShardCache cache(dpt::data::ShardCacheOptions("/scratch/dptrain-shards").max_bytes(50 << 30));
//   std::string local = cache.local("s3://imagenet/train/train-000017.tar", shard_bytes);

#include <torch/arg.h>

#include <cstdint>
#include <string>

#include "dptrain/data/remote_store.h"

namespace dpt::data {

struct ShardCacheOptions {
  explicit ShardCacheOptions(std::string folder = {}) : folder_(std::move(folder)) {}
  // Empty: default_shard_cache_folder().
  TORCH_ARG(std::string, folder);
  // The most bytes of shards the folder holds; a shard larger than this is refused.
  TORCH_ARG(int64_t, max_bytes) = int64_t{20} << 30;
  // Shards fetched ahead at once, each over a connection of its own: while one fetch's request
  // crosses the link and the server looks for its file, another's bytes fill the link.
  TORCH_ARG(int, fetch_streams) = 2;
  TORCH_ARG(RemoteOptions, remote) = {};
};

// The cache folder when none is given: $XDG_CACHE_HOME/dptrain/shards, else ~/.cache/dptrain/shards,
// else /tmp/dptrain-shards-<uid>.
std::string default_shard_cache_folder();

class ShardCache {
 public:
  explicit ShardCache(ShardCacheOptions options);

  // The local path of the whole file at `url`, fetching it if it is not there. `bytes`, when not
  // negative, is its size: a file of another size is fetched again, and a fetch that brings
  // another size is a DataError naming the URL.
  std::string local(const std::string& url, int64_t bytes) const;
  // Whether `url`'s file is in the folder now.
  bool holds(const std::string& url, int64_t bytes) const;

  const RemoteStore& store() const { return store_; }
  const ShardCacheOptions& options() const { return options_; }

 private:
  std::string path_of(const std::string& url) const;
  // Removes the least recently read files until `bytes` more fit; under the folder's lock.
  void make_room(int64_t bytes, const std::string& keep) const;

  ShardCacheOptions options_;
  RemoteStore store_;
};

}  // namespace dpt::data
