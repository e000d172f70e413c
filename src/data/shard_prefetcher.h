#pragma once
// Fetches a remote shard set's shards into the cache (shard_cache.h) in the order the loader will
// read them, on threads of its own (the cache's fetch_streams, each taking the next shard in the
// order), keeping at most `ahead_bytes` of shards fetched beyond the furthest one read so far:
// the next shards are local when the loader reaches them, and the cache is not filled with
// shards the epoch needs only much later. Once the epoch's shards are fetched it goes on with the
// next epoch's (then()), within the same bound, so that the next epoch's first batches do not
// wait for the link when the epoch turns. Private to the data layer.

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
  // `order`: shard numbers (into `urls` and `sizes`) in the order the epoch first reads them.
  ShardPrefetcher(const ShardCache& cache, const std::vector<std::string>& urls, const std::vector<int64_t>& sizes,
                  std::vector<size_t> order, int64_t ahead_bytes);
  // Stops after the fetches under way, if any.
  ~ShardPrefetcher();
  ShardPrefetcher(const ShardPrefetcher&) = delete;
  ShardPrefetcher& operator=(const ShardPrefetcher&) = delete;

  // A sample of shard `shard` was read in this epoch: the fetching may go further.
  void reading(size_t shard);
  // The next epoch's shards in their order (replacing any said before): fetched after this
  // epoch's, the bytes of both ahead of the reading within the bound. Its reading is the next
  // prefetcher's to follow.
  void then(const std::vector<size_t>& next_order);

 private:
  void run();

  const ShardCache& cache_;
  const std::vector<std::string>& urls_;
  const std::vector<int64_t>& sizes_;
  const size_t epoch_shards_;       // order_'s first ones, this epoch's; then the next epoch's
  std::vector<size_t> position_;    // of each shard in this epoch's order (epoch_shards_ when absent)
  int64_t ahead_bytes_;
  std::mutex mutex_;
  std::condition_variable wake_;
  std::vector<size_t> order_;          // under mutex_, as then() grows it
  std::vector<int64_t> bytes_before_;  // of order_'s shards before each position
  size_t read_up_to_ = 0;  // one past the furthest position read
  size_t next_ = 0;        // the position the next free thread fetches
  bool stop_ = false;
  std::vector<std::thread> threads_;
};

}  // namespace dpt::data
