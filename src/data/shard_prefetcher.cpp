#include "shard_prefetcher.h"

#include <algorithm>

#include "dptrain/common/error.h"

namespace dpt::data {

ShardPrefetcher::ShardPrefetcher(const ShardCache& cache, const std::vector<std::string>& urls,
                                 const std::vector<int64_t>& sizes, std::vector<size_t> order, int64_t ahead_bytes)
    : cache_(cache),
      urls_(urls),
      sizes_(sizes),
      order_(std::move(order)),
      position_(urls.size(), order_.size()),
      ahead_bytes_(ahead_bytes) {
  bytes_before_.push_back(0);
  for (size_t k = 0; k < order_.size(); ++k) {
    position_[order_[k]] = k;
    bytes_before_.push_back(bytes_before_.back() + std::max<int64_t>(sizes_[order_[k]], 0));
  }
  thread_ = std::thread([this] { run(); });
}

ShardPrefetcher::~ShardPrefetcher() {
  {
    std::lock_guard<std::mutex> lock(mutex_);
    stop_ = true;
  }
  wake_.notify_all();
  thread_.join();
}

void ShardPrefetcher::reading(size_t shard) {
  const size_t position = position_[shard];
  if (position == order_.size()) return;
  {
    std::lock_guard<std::mutex> lock(mutex_);
    if (position < read_up_to_) return;
    read_up_to_ = position + 1;
  }
  wake_.notify_all();
}

void ShardPrefetcher::run() {
  for (size_t k = 0; k < order_.size(); ++k) {
    {
      // The shard at k fits when what lies fetched ahead of the reading, with it, stays within
      // the bound; the shard being read next always does.
      std::unique_lock<std::mutex> lock(mutex_);
      wake_.wait(lock, [&] {
        const size_t from = std::min(read_up_to_, k);
        return stop_ || k <= read_up_to_ || bytes_before_[k + 1] - bytes_before_[from] <= ahead_bytes_;
      });
      if (stop_) return;
    }
    try {
      cache_.local(urls_[order_[k]], sizes_[order_[k]]);
    } catch (const Error&) {
      // The loader's own read of this shard fetches again and reports the failure with its sample.
    }
  }
}

}  // namespace dpt::data
