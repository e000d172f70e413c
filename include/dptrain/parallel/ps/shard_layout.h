#pragma once
// How the parameters are cut between the servers. The gradients travel in the reducer's buckets
// (reducer.h: the same layout on every worker), and every bucket is split into one contiguous
// chunk per server, sizes differing by at most one element: each server holds 1/S of every
// bucket, so the shards are balanced and a large tensor is spread over all servers.
//
//   ShardLayout layout(tensors, /*servers=*/2, options.buckets());
//   Chunk c = layout.chunk(bucket, server);   // elements [c.offset, c.offset + c.numel) of it

#include <ATen/ATen.h>

#include <cstdint>
#include <vector>

#include "dptrain/parallel/reducer.h"

namespace dpt::ps {

struct Chunk {
  int64_t offset = 0;
  int64_t numel = 0;
};

// A parameter's place in its bucket's flat buffer.
struct Placement {
  size_t bucket = 0;
  int64_t offset = 0;
};

class ShardLayout {
 public:
  // `tensors`: the served parameters, in registration order (float32, as the servers keep them).
  ShardLayout(const std::vector<at::Tensor>& tensors, int servers, const ReducerOptions& buckets);

  int servers() const { return servers_; }
  size_t bucket_count() const { return buckets_.size(); }
  // The parameter indices of bucket `b`, in the order its flat buffer lays them out.
  const std::vector<size_t>& bucket(size_t b) const { return buckets_[b]; }
  const std::vector<std::vector<size_t>>& buckets() const { return buckets_; }
  int64_t bucket_numel(size_t b) const { return bucket_numel_[b]; }
  Chunk chunk(size_t b, int server) const;
  const Placement& placement(size_t parameter) const { return placements_[parameter]; }
  // Elements server `server` holds over all buckets.
  int64_t server_numel(int server) const;

 private:
  int servers_;
  std::vector<std::vector<size_t>> buckets_;
  std::vector<int64_t> bucket_numel_;
  std::vector<Placement> placements_;
};

}  // namespace dpt::ps
