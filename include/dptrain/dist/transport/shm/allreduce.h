#pragma once
// Allreduce through shared memory, for ranks that all run on one host.
//
// Gloo moves every byte of a local allreduce through loopback TCP: the kernel copies it into a
// socket buffer and out again, on both sides, on the CPUs that are also computing backward.
// Here every rank maps one segment of /dev/shm instead, and a chunk of the tensor takes three steps:
//
//   1. copy in:  each rank copies into its own slot of the segment the parts of the chunk that
//                the other ranks reduce (rank r reduces the r-th of N parts);
//   2. reduce:   rank r reduces its part, its own values from its tensor and the others' from
//                their slots, into its slot and its tensor;
//   3. copy out: each rank copies the other parts, already reduced, from their owners' slots.
//
// Chunks are at most `slot_bytes`; each rank has two slots, so one chunk's copy-out overlaps the
// next one's copy-in. Ranks wait for each other on futexes in the segment, never by spinning (the
// CPUs are busy with backward), with the communicator's timeout, and notice a peer that exited.
// Operations run in order on one thread per rank, as Gloo's do. all_gather and broadcast run
// through the same slots without a reduction (each rank, or the root, copies its part in, then the
// others copy it out).
//
//   std::string why_not;
//   auto local = dpt::dist::transport::shm::Allreduce::attach(store, world, {}, &why_not);  // collective
//   if (local && local->accepts(bucket, ReduceOp::Sum)) local->all_reduce(bucket, ReduceOp::Sum)->wait();
//
// shm/transport.h puts it behind the transport interface.

#include <chrono>
#include <cstddef>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include <torch/arg.h>

#include "dptrain/compat/compat.h"
#include "dptrain/dist/collective.h"
#include "dptrain/dist/world.h"

namespace dpt::dist::transport::shm {

// 4 MiB up to 4 ranks, then less, so that a segment of two slots per rank stays at 32 MiB: half
// of the 64 MiB of /dev/shm a Docker container gets by default.
size_t default_slot_bytes(int world_size);

struct Options {
  // The largest chunk one allreduce step moves; the segment holds two per rank. Unset:
  // default_slot_bytes(world size).
  TORCH_ARG(std::optional<size_t>, slot_bytes) = std::nullopt;
  // Bound on attaching and on each operation.
  TORCH_ARG(std::chrono::milliseconds, timeout) = kDefaultTimeout;
  // The job's rank of each rank of this group, which errors name (a machine's group under the
  // hierarchical allreduce); empty: the group is the job.
  TORCH_ARG(std::vector<int>, job_ranks);
};

class Allreduce {
 public:
  // Collective: every rank of `world` calls it with the same store and options. Rank 0 creates the
  // segment and names it in `store`; the others map it. Returns null on every rank, with the
  // reason in `*why_not`, when any rank could not map it (ranks on other hosts, /dev/shm too small).
  static std::unique_ptr<Allreduce> attach(c10d::Store& store, const WorldInfo& world, const Options& options = {},
                                           std::string* why_not = nullptr);
  ~Allreduce();
  Allreduce(const Allreduce&) = delete;
  Allreduce& operator=(const Allreduce&) = delete;

  // Contiguous float32 or float64 CPU tensors: sum, mean, maximum or minimum.
  static bool accepts(const at::Tensor& tensor, ReduceOp op);

  // In place, queued behind the operations started before it; wait() on the result. Every rank
  // must give the same `step` (the caller's position, -1 for none) with the same size, type and
  // op, or all of them fail naming each one's.
  compat::WorkPtr all_reduce(at::Tensor tensor, ReduceOp op, int64_t step = -1);

  // As all_reduce, but only `root`'s tensor ends with the result (the others skip step 3 and hold
  // partial values): the first half of the hierarchical allreduce.
  compat::WorkPtr reduce(at::Tensor tensor, ReduceOp op, int root, int64_t step = -1);

  // Every rank's `input` into `output` (world x its size, rank r's at r x size), queued as above.
  // A chunk takes two steps: each rank copies its part into its slot, then copies every other
  // rank's out of theirs. Tensors as accepts() takes them for Sum.
  compat::WorkPtr all_gather(at::Tensor input, at::Tensor output, int64_t step = -1);

  // Every rank ends with `root`'s `tensor`, queued as above. A chunk takes two steps: the root
  // copies it into its slot, then the others copy it out. Tensors as accepts() takes them for Sum.
  compat::WorkPtr broadcast(at::Tensor tensor, int root, int64_t step = -1);

  // An operation that runs out of time fails within this long after its timeout, with an error
  // that names the rank it waited for; whoever waits on it gives it that much more.
  static constexpr std::chrono::milliseconds kFailureReportDelay{2000};

 private:
  struct State;  // the segment, the queue and the thread that serves it
  explicit Allreduce(std::unique_ptr<State> state);

  std::unique_ptr<State> state_;
};

}  // namespace dpt::dist::transport::shm
