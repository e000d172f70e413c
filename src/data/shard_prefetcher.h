#pragma once
// Fetches a remote shard set's shards into the cache (shard_cache.h) in the order the loader will
// read them, on a thread of its own, keeping at most `ahead_bytes` of shards fetched beyond the
// furthest one read so far: the next shards are local when the loader reaches them, and the cache
// is not filled with shards the epoch needs only much later. Private to the data layer.

#include <condition_variable>
#include <cstdint>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "dptrain/data/shard_cache.h"

namespace dpt::data {

class ShardPrefetcher {
 public:
  // `order`: shard numbers (into `urls` and `sizes`) in the order they are first read.
  ShardPrefetcher(const ShardCache& cache, const std::vector<std::string>& urls, const std::vector<int64_t>& sizes,
                  std::vector<size_t> order, int64_t ahead_bytes);
  // Stops after the fetch under way, if any.
  ~ShardPrefetcher();
  ShardPrefetcher(const ShardPrefetcher&) = delete;
  ShardPrefetcher& operator=(const ShardPrefetcher&) = delete;

  // A sample of shard `shard` was read: the fetching may go further.
  void reading(size_t shard);

 private:
  void run();

  const ShardCache& cache_;
  const std::vector<std::string>& urls_;
  const std::vector<int64_t>& sizes_;
  std::vector<size_t> order_;
  std::vector<size_t> position_;    // of each shard in order_ (order_.size() when absent)
  std::vector<int64_t> bytes_before_;  // of order_'s shards before each position
  int64_t ahead_bytes_;
  std::mutex mutex_;
  std::condition_variable wake_;
  size_t read_up_to_ = 0;  // one past the furthest position read
  bool stop_ = false;
  std::thread thread_;
};

}  // namespace dpt::data
