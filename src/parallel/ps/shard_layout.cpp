#include "dptrain/parallel/ps/shard_layout.h"

#include "dptrain/common/error.h"

namespace dpt::ps {

ShardLayout::ShardLayout(const std::vector<at::Tensor>& tensors, int servers, const ReducerOptions& buckets)
    : servers_(servers), buckets_(assign_buckets(tensors, bucket_caps(buckets))), placements_(tensors.size()) {
  DPT_CHECK(servers >= 1, ConfigError, "a parameter server job needs at least one server, got ", servers);
  for (size_t b = 0; b < buckets_.size(); ++b) {
    int64_t offset = 0;
    for (size_t i : buckets_[b]) {
      placements_[i] = Placement{b, offset};
      offset += tensors[i].numel();
    }
    bucket_numel_.push_back(offset);
  }
}

Chunk ShardLayout::chunk(size_t b, int server) const {
  // The first (numel % servers) chunks take one element more.
  const int64_t numel = bucket_numel_[b];
  const int64_t base = numel / servers_, extra = numel % servers_;
  const int64_t s = server;
  return Chunk{s * base + std::min(s, extra), base + (s < extra ? 1 : 0)};
}

int64_t ShardLayout::server_numel(int server) const {
  int64_t total = 0;
  for (size_t b = 0; b < buckets_.size(); ++b) total += chunk(b, server).numel;
  return total;
}

}  // namespace dpt::ps
