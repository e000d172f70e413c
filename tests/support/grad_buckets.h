#pragma once
// Gradient buckets laid out by hand, for calling a communication hook without a reducer:
//
//   dpt::GradBucket bucket = dpt::testing::grad_bucket(/*index=*/0, /*count=*/1, {{10, 32}, {10}});
//   bucket.gradients[0].copy_(...);
//   hook(comm, bucket).wait();   // bucket.buffer holds the result

#include <cstdint>
#include <vector>

#include <c10/util/accumulate.h>

#include "dptrain/parallel/comm_hooks.h"

namespace dpt::testing {

// A zeroed float buffer holding tensors of `shapes` end to end, each gradient a view of it.
inline GradBucket grad_bucket(size_t index, size_t count, const std::vector<std::vector<int64_t>>& shapes) {
  GradBucket bucket;
  bucket.index = index;
  bucket.count = count;
  int64_t numel = 0;
  for (const auto& shape : shapes) numel += c10::multiply_integers(shape);
  bucket.buffer = at::zeros({numel});
  int64_t at = 0;
  for (const auto& shape : shapes) {
    const int64_t n = c10::multiply_integers(shape);
    bucket.gradients.push_back(bucket.buffer.narrow(0, at, n).view(shape));
    bucket.offsets.push_back(at);
    at += n;
  }
  return bucket;
}

}  // namespace dpt::testing
