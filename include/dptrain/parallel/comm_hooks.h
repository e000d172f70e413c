#pragma once
// Communication hooks: how one flat gradient bucket is reduced across ranks. The default averages
// in the bucket's own dtype; the compressing hooks send half the bytes and write the mean back.
//
//   ddp.register_comm_hook(dpt::comm_hooks::fp16_compress());
//
//   // A custom hook: start the reduction, return what to wait on. Once waited, `bucket` must hold
//   // the reduced gradient.
//   dpt::CommHook sum = [](dpt::dist::Communicator& comm, at::Tensor bucket) {
//     return dpt::PendingReduction(comm.all_reduce_async(bucket, dpt::dist::ReduceOp::Sum));
//   };

#include <functional>
#include <utility>

#include <ATen/ATen.h>

#include "dptrain/dist/communicator.h"

namespace dpt {

// A bucket reduction in flight: the collective, then an optional step that writes the result
// back into the bucket (decompression). Move-only; waiting twice is a no-op.
class PendingReduction {
 public:
  PendingReduction() = default;
  explicit PendingReduction(dist::Work work, std::function<void()> then = {})
      : work_(std::move(work)), then_(std::move(then)) {}

  void wait() {
    work_.wait();
    if (then_) std::exchange(then_, nullptr)();
  }
  // When the collective completed (dist::Work::completed_at); the write-back runs after it.
  dist::Work::Clock::time_point completed_at() const { return work_.completed_at(); }

 private:
  dist::Work work_;
  std::function<void()> then_;
};

// Starts reducing `bucket` (a flat, contiguous tensor aliased by the parameters' .grad).
using CommHook = std::function<PendingReduction(dist::Communicator& comm, at::Tensor bucket)>;

namespace comm_hooks {

// The mean over ranks in the bucket's dtype (PyTorch DDP's default allreduce hook).
CommHook allreduce_mean();

// The sum over ranks in the bucket's dtype (Horovod's op=Sum).
CommHook allreduce_sum();

// Divides by the world size, reduces in float16, writes the mean back in the bucket's dtype
// (PyTorch's fp16_compress_hook). Values beyond float16's range (65504) overflow to inf.
CommHook fp16_compress();

// As fp16_compress, but the sum over ranks (no division): Horovod's fp16 compression with op=Sum.
CommHook fp16_compress_sum();

// As fp16_compress with bfloat16: float32's range, 8 bits of mantissa. On backends without
// bfloat16 reductions (Gloo before LibTorch 2.3) the Communicator reduces through float32, so
// the result is rounded like bfloat16 but no bytes are saved.
CommHook bf16_compress();

}  // namespace comm_hooks
}  // namespace dpt
