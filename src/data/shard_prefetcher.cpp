#include "shard_prefetcher.h"

#include <algorithm>

#include "dptrain/common/error.h"

namespace dpt::data {

ShardPrefetcher::ShardPrefetcher(const ShardCache& cache, const std::vector<std::string>& urls,
                                 const std::vector<int64_t>& sizes, std::vector<size_t> order, int64_t ahead_bytes)
    : cache_(cache),
      urls_(urls),
      sizes_(sizes),
      epoch_shards_(order.size()),
      position_(urls.size(), order.size()),
      ahead_bytes_(ahead_bytes),
      order_(std::move(order)) {
  bytes_before_.push_back(0);
  for (size_t k = 0; k < order_.size(); ++k) {
    position_[order_[k]] = k;
    bytes_before_.push_back(bytes_before_.back() + std::max<int64_t>(sizes_[order_[k]], 0));
  }
  for (int t = 0; t < cache.options().fetch_streams(); ++t) threads_.emplace_back([this] { run(); });
}

ShardPrefetcher::~ShardPrefetcher() {
  {
    std::lock_guard<std::mutex> lock(mutex_);
    stop_ = true;
  }
  wake_.notify_all();
  for (auto& thread : threads_) thread.join();
}

void ShardPrefetcher::reading(size_t shard) {
  const size_t position = position_[shard];
  if (position == epoch_shards_) return;
  {
    std::lock_guard<std::mutex> lock(mutex_);
    if (position < read_up_to_) return;
    read_up_to_ = position + 1;
  }
  wake_.notify_all();
}

void ShardPrefetcher::then(const std::vector<size_t>& next_order) {
  {
    std::lock_guard<std::mutex> lock(mutex_);
    order_.resize(epoch_shards_);
    bytes_before_.resize(epoch_shards_ + 1);
    for (size_t shard : next_order) {
      order_.push_back(shard);
      bytes_before_.push_back(bytes_before_.back() + std::max<int64_t>(sizes_[shard], 0));
    }
  }
  wake_.notify_all();
}

void ShardPrefetcher::run() {
  for (;;) {
    size_t shard;
    {
      // The next shard fits when what lies fetched ahead of the reading, with it, stays within
      // the bound; the shard being read next always does. Past this epoch's shards, the next
      // epoch's wait for then().
      std::unique_lock<std::mutex> lock(mutex_);
      wake_.wait(lock, [&] {
        if (stop_) return true;
        const size_t k = next_;
        if (k >= order_.size()) return false;
        const size_t from = std::min(read_up_to_, k);
        return k <= read_up_to_ || bytes_before_[k + 1] - bytes_before_[from] <= ahead_bytes_;
      });
      if (stop_) return;
      shard = order_[next_++];
    }
    try {
      cache_.local(urls_[shard], sizes_[shard]);
    } catch (const Error&) {
      // The loader's own read of this shard fetches again and reports the failure with its sample.
    }
  }
}

}  // namespace dpt::data
