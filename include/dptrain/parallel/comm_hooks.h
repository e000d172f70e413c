#pragma once
// Communication hooks: how one flat gradient bucket is reduced across ranks. The default averages
// in the bucket's own dtype; the compressing hooks send half the bytes and write the mean back.
//
//   ddp.register_comm_hook(dpt::comm_hooks::fp16_compress());
//
//   // A custom hook: start the reduction, return what to wait on. Once waited, the bucket's
//   // buffer must hold the reduced gradient.
//   dpt::CommHook sum = [](dpt::dist::Communicator& comm, const dpt::GradBucket& bucket) {
//     return dpt::PendingReduction(comm.all_reduce_async(bucket.buffer, dpt::dist::ReduceOp::Sum));
//   };
//
// A hook that keeps state across steps (PowerSGD's error feedback, powersgd.h) keys it by the
// bucket's index: the reducer hands every hook the same buckets, in the same order, every step.

#include <cstdint>
#include <functional>
#include <utility>
#include <vector>

#include <ATen/ATen.h>

#include "dptrain/dist/communicator.h"

namespace dpt {

// A bucket reduction in flight: the collective, then an optional step that writes the result
// back into the bucket (decompression). Move-only; waiting twice is a no-op.
//
// A reduction in two stages (PowerSGD: Q is reduced once the reduced P is known) names its second
// stage's start, `advance`: the reducer runs it once it has launched the next bucket (or at the end
// of backward), so the second collective starts in the same order on every rank and overlaps the
// rest of backward; wait() runs it first if nobody did.
class PendingReduction {
 public:
  PendingReduction() = default;
  // `reduced_bytes`: what this rank puts into reductions for the bucket (a compressing hook's
  // compressed size), for the timeline and the report; -1: the bucket's own size.
  explicit PendingReduction(dist::Work work, std::function<void()> then = {}, int64_t reduced_bytes = -1)
      : work_(std::move(work)), then_(std::move(then)), reduced_bytes_(reduced_bytes) {}

  // Two stages: `advance` waits for what the hook started and starts the second stage, `then`
  // waits for that and writes the result back.
  static PendingReduction in_stages(std::function<void()> advance, std::function<void()> then, int64_t reduced_bytes) {
    PendingReduction staged(dist::Work(), std::move(then), reduced_bytes);
    staged.advance_ = std::move(advance);
    return staged;
  }

  void advance() {
    if (advance_) std::exchange(advance_, nullptr)();
  }
  void wait() {
    advance();
    work_.wait();
    if (then_) {
      std::exchange(then_, nullptr)();
      if (!work_.valid()) written_back_at_ = dist::Work::Clock::now();
    }
  }
  // When the collective completed (dist::Work::completed_at); the write-back runs after it.
  dist::Work::Clock::time_point completed_at() const { return work_.completed_at(); }
  // When the bucket held its result: the collective's completion, or for a reduction whose
  // collectives are the hook's own (in stages, or point to point) the write-back's end, known once
  // waited.
  dist::Work::Clock::time_point finished_at() const {
    return written_back_at_ != dist::Work::Clock::time_point{} ? written_back_at_ : work_.completed_at();
  }

  int64_t reduced_bytes() const { return reduced_bytes_; }

 private:
  dist::Work work_;
  std::function<void()> advance_;
  std::function<void()> then_;
  int64_t reduced_bytes_ = -1;
  dist::Work::Clock::time_point written_back_at_{};
};

// One bucket of gradients, as the reducer hands it to a hook (PyTorch's GradBucket).
struct GradBucket {
  size_t index = 0;  // in launch order, the same every step
  size_t count = 0;  // buckets in all
  // Flat and contiguous; the parameters' .grad alias it, each from its offset, laid out as the
  // parameter is (a channels_last weight's gradient in channels_last order).
  at::Tensor buffer;
  std::vector<at::Tensor> gradients;  // each parameter's, in the bucket's order
  std::vector<int64_t> offsets;       // where each begins in `buffer`

  // The bucket reduced last in a step.
  bool is_last() const { return index + 1 == count; }
};

// Starts reducing `bucket`.
using CommHook = std::function<PendingReduction(dist::Communicator& comm, const GradBucket& bucket)>;

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

// PowerSGD (powersgd.h) is a hook with state: comm_hooks::powersgd(state).

}  // namespace comm_hooks
}  // namespace dpt
