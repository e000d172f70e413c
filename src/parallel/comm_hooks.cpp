#include "dptrain/parallel/comm_hooks.h"

namespace dpt::comm_hooks {

// The transport divides where it costs least (dist/transport/transport.h).
CommHook allreduce_mean() {
  return [](dist::Communicator& comm, const GradBucket& bucket) {
    return PendingReduction(comm.all_reduce_async(bucket.buffer, dist::ReduceOp::Mean));
  };
}

CommHook allreduce_sum() {
  return [](dist::Communicator& comm, const GradBucket& bucket) {
    return PendingReduction(comm.all_reduce_async(bucket.buffer, dist::ReduceOp::Sum));
  };
}

namespace {

// Dividing before the sum (not after) keeps the float16 partial sums small, as PyTorch's hook does.
CommHook compress_to(at::ScalarType wire_type, bool average = true) {
  return [wire_type, average](dist::Communicator& comm, const GradBucket& bucket) {
    at::Tensor wire = bucket.buffer.to(wire_type);
    if (average) wire.div_(comm.size());
    dist::Work work = comm.all_reduce_async(wire, dist::ReduceOp::Sum);
    const int64_t bytes = wire.nbytes();
    return PendingReduction(
        std::move(work), [buffer = bucket.buffer, wire]() mutable { buffer.copy_(wire); }, bytes);
  };
}

}  // namespace

CommHook fp16_compress() { return compress_to(at::kHalf); }

CommHook fp16_compress_sum() { return compress_to(at::kHalf, /*average=*/false); }

CommHook bf16_compress() { return compress_to(at::kBFloat16); }

}  // namespace dpt::comm_hooks
