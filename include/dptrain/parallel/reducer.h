#pragma once
// The gradient reducer shared by the data-parallel front ends: parameters are grouped into flat
// buckets, each parameter's .grad aliases its slice of a bucket, a post-hook on each gradient
// accumulator marks the parameter ready, and a bucket is reduced (asynchronously, overlapping the
// rest of backward) as soon as all its parameters are ready. At the end of backward a callback
// waits for every bucket, so on return from backward() every .grad holds the reduced gradient.
//
//   dpt::Reducer reducer(named_parameters, comm, dpt::ReducerOptions().bucket_cap_mb(25));
//   reducer.prepare_for_backward();   // arm for the next backward (skip it to accumulate locally)
//   loss.backward();                   // .grad now holds the mean over ranks
//
// Buckets are filled in reverse registration order (backward produces the last layers' gradients
// first), so the first bucket to fill is small and its reduction starts early. Buckets are
// launched in index order on every rank, which keeps the collectives matched across ranks.

#include <chrono>
#include <cstdint>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include <torch/arg.h>
#include <torch/csrc/autograd/function.h>

#include "dptrain/compat/autograd_node.h"
#include "dptrain/dist/communicator.h"
#include "dptrain/parallel/comm_hooks.h"

namespace dpt {

struct ReducerOptions {
  // Size limit of every bucket after the first, in MiB.
  TORCH_ARG(double, bucket_cap_mb) = 25;
  // Size limit of the first bucket, in MiB: small, so that communication starts early.
  TORCH_ARG(double, first_bucket_cap_mb) = 1;
  // Size limit of the last bucket, in MiB; the buckets before it double up to bucket_cap_mb. The
  // parameters registered first get their gradients last: small buckets there leave little to
  // communicate once backward ends.
  TORCH_ARG(double, last_bucket_cap_mb) = 1;
  // When true, parameters that got no gradient by the end of backward count as ready with
  // whatever their .grad holds (zero after zero_grad). One more small allreduce per step finds
  // the parameters no rank used; those whose .grad was unset keep it unset, as in PyTorch, so
  // optimizers skip them. When false, an unused parameter is an error.
  TORCH_ARG(bool, find_unused_parameters) = false;
  // Backward passes per reduction: once armed, the first n-1 backward passes accumulate into
  // .grad locally and the n-th reduces the accumulated sum (Horovod's backward_passes_per_step).
  TORCH_ARG(int, backward_passes) = 1;
  // ZeRO-2 (ZeroStage2Optimizer): every bucket is reduce-scattered (averaged) instead of
  // all-reduced, and this rank keeps only its 1/world of it (gradient_shard()). A bucket's buffer
  // exists from the first gradient of a reducing backward that fills it until its reduction
  // completes, and the parameters' .grad are unset after that backward: the whole gradient is never
  // held at once. Excludes a comm hook and find_unused_parameters.
  TORCH_ARG(bool, shard_gradients) = false;
};

// Where the last reduction's time went, for timelines: each bucket from launch to completion,
// and the wait after backward's compute.
struct ReductionTimes {
  using Clock = std::chrono::steady_clock;
  struct Bucket {
    Clock::time_point launched;
    Clock::time_point completed;
    int64_t bytes = 0;          // the bucket's gradients
    int64_t reduced_bytes = 0;  // what the comm hook reduced for them (less when it compresses)
  };
  std::vector<Bucket> buckets;  // in launch order
  Clock::time_point began;       // the backward's first gradient reached the reducer
  Clock::time_point wait_began;  // backward had finished computing; the reducer began to wait
  Clock::time_point finished;    // every bucket reduced (and unused parameters counted)
};

struct NamedParameter {
  std::string name;
  at::Tensor tensor;
};

// Bucket size limits in bytes.
struct BucketCaps {
  int64_t first = 0;  // the first bucket launched
  int64_t rest = 0;   // the buckets in between
  int64_t last = 0;   // the last bucket launched
};

// ReducerOptions' limits (MiB) in bytes; a ConfigError unless each lies above 0 and at most 1 TiB.
BucketCaps bucket_caps(const ReducerOptions& options);

// The parameter indices of each bucket, in launch order, each bucket's in reverse order. Per
// (dtype, device), a bucket closes once it reaches its limit: the first bucket takes the last
// registered parameters up to caps.first; the last bucket the first registered ones up to
// caps.last, each bucket before it twice as much while that is below caps.rest; the parameters in
// between fill buckets of caps.rest from the top, or join the first bucket when they add up to
// less than caps.first. With caps.last >= caps.rest that is PyTorch's layout: reverse order all
// along.
std::vector<std::vector<size_t>> assign_buckets(const std::vector<at::Tensor>& params, const BucketCaps& caps);

class Reducer {
 public:
  // `params`: the parameters to reduce (those requiring gradients), in registration order.
  Reducer(std::vector<NamedParameter> params, std::shared_ptr<dist::Communicator> comm,
          ReducerOptions options = {});
  ~Reducer();
  Reducer(const Reducer&) = delete;
  Reducer& operator=(const Reducer&) = delete;

  // Replaces the default mean allreduce.
  void set_comm_hook(CommHook hook);

  // Lays the buckets out anew with ReducerOptions::bucket_cap_mb `bucket_cap_mb` (BucketTuner's
  // choices), between steps; every rank at the same step. Not with shard_gradients (the sharded
  // optimizer is cut from the buckets), nor under a hook that keeps state per bucket once it has
  // begun (PowerSGD after its start_iter).
  void rebucket(double bucket_cap_mb);

  // Arms the hooks: the next backward (the backward_passes-th from now) will reduce. Without it,
  // backward accumulates locally. Also points every parameter's .grad at its bucket slice, keeping its value (zero
  // when unset), since optimizers may have reset gradients to undefined since the last step.
  void prepare_for_backward();

  // Whether the hooks will reduce in a coming backward (false once that reduction is done).
  bool armed() const;
  // Takes back prepare_for_backward(): the coming backward accumulates locally (a no_sync()
  // entered between a forward and its backward). Before that backward starts.
  void disarm();

  // Backward passes that accumulated locally since the reducer was armed.
  int accumulated_passes() const;

  const std::vector<std::vector<size_t>>& bucket_indices() const { return bucket_indices_; }
  // Bucket `b`'s flat gradient buffer (what the comm hook is handed for it; with
  // shard_gradients, undefined outside a reduction).
  const at::Tensor& bucket_buffer(size_t b) const { return buckets_[b].buffer; }
  // shard_gradients: this rank's part of bucket `b` after a reducing backward, the averaged
  // gradient of its elements [rank x n, (rank + 1) x n), n = this tensor's size, of the bucket's
  // parameters laid end to end (each in its memory order) and padded with zeros to world x n.
  const at::Tensor& gradient_shard(size_t b) const { return buckets_[b].shard; }
  // The parameters, in the order given (bucket_indices() numbers them).
  const std::vector<NamedParameter>& parameters() const { return params_; }

  // Time the last reduction spent waiting for communication after backward had finished
  // computing (the part not hidden behind backward), and when that reduction ended.
  double last_comm_wait_ms() const {
    return std::chrono::duration<double, std::milli>(last_.finished - last_.wait_began).count();
  }
  std::chrono::steady_clock::time_point last_finished_at() const { return last_.finished; }
  // The last reduction's buckets and wait.
  ReductionTimes last_reduction() const;

 private:
  struct Bucket {
    at::Tensor buffer;                 // flat, contiguous (shard_gradients: only while in use)
    at::Tensor shard;                  // shard_gradients: this rank's part of the reduced buffer
    int64_t numel = 0;                 // the buffer's, padded to a multiple of the world size when sharded
    std::vector<size_t> params;        // indices into params_
    size_t pending = 0;                // parameters not yet ready in this backward
    GradBucket handed;                 // what the comm hook is given (unless sharded)
    PendingReduction reduction;
    std::chrono::steady_clock::time_point launched_at{};
  };
  struct Slot {
    size_t bucket;
    int64_t offset = 0;                // in the bucket
    at::Tensor grad;                   // alias of the bucket slice, shaped like the parameter
    bool ready = false;
    bool used = false;                 // got a gradient from this backward (not only made ready)
    bool grad_was_unset = false;       // .grad was undefined when the backward was armed
  };
  class ReadyHook;

  // Buckets, slots and the hooks' views for options_'s caps (the constructor, rebucket()).
  void lay_out_buckets();
  void mark_ready(size_t index);
  bool accumulating_locally();
  void adopt_gradient(size_t index);
  void allocate_bucket(size_t b);
  void release_completed_buckets();
  static constexpr size_t kShardedBucketsInFlight = 2;
  void rebind_gradients();
  void launch_ready_buckets();
  void finish_backward();
  PendingReduction count_users();
  void unset_globally_unused(const at::Tensor& users);
  std::string describe_unready() const;

  std::vector<NamedParameter> params_;
  std::shared_ptr<dist::Communicator> comm_;
  ReducerOptions options_;
  CommHook hook_;
  std::vector<std::vector<size_t>> bucket_indices_;
  std::vector<Bucket> buckets_;
  std::vector<Slot> slots_;
  // The graph nodes the hooks live on. A parameter only holds its accumulator weakly.
  std::vector<compat::NodePtr> accumulators_;
  std::vector<uintptr_t> hook_keys_;

  mutable std::mutex mutex_;
  bool armed_ = false;
  bool finish_queued_ = false;
  int passes_done_ = 0;             // local backward passes since prepare_for_backward
  bool pass_end_queued_ = false;    // this local pass's end-of-backward count is queued
  size_t next_launch_ = 0;
  ReductionTimes last_;  // the buckets' times are filled in by last_reduction()
};

}  // namespace dpt
