#include "dptrain/dist/transport/shm/allreduce.h"

#include <signal.h>
#include <sys/mman.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <cstring>
#include <functional>
#include <vector>

#include "../completing_work.h"
#include "../process_group/agreement.h"
#include "../served_queue.h"
#include "dptrain/common/error.h"
#include "dptrain/dist/store_text.h"
#include "reduce_parts.h"
#include "segment.h"

namespace dpt::dist::transport::shm {
namespace {

using Clock = std::chrono::steady_clock;

// How often a waiting rank looks at its deadline, at its peers' pids and at shutdown.
constexpr std::chrono::milliseconds kWaitSlice{100};
// Polls of a counter before sleeping on it: a peer on another idle CPU often gets there in that time.
constexpr int kSpins = 64;

void cpu_relax() {
#if defined(__x86_64__) || defined(__i386__)
  __builtin_ia32_pause();
#endif
}

}  // namespace

struct Allreduce::State {
  enum class Kind { Reduce, Gather, Broadcast };  // Reduce: to every rank, or to `root` when set
  struct Operation {
    Kind kind = Kind::Reduce;
    at::Tensor tensor;
    ReduceOp op = ReduceOp::Sum;
    int64_t step = -1;
    c10::intrusive_ptr<CompletingWork> work;
    at::Tensor gathered;  // Gather: where every rank's `tensor` goes
    int root = -1;        // Broadcast: the rank whose `tensor` every rank ends with; Reduce: the only
                          // rank that does, or -1 for every rank
  };

  State(std::unique_ptr<Segment> segment, const WorldInfo& world, const Options& options,
        bool peers_visible)
      : segment(std::move(segment)),
        rank(world.rank),
        world_size(world.world_size),
        options(options),
        peers_visible(peers_visible),
        operations([this](Operation& operation) { serve(operation); }) {}

  ~State() {
    stopping = true;    // what is still queued fails at once: its waits look at this
    operations.stop();
    // Peers still waiting for this rank learn at once that it will not come.
    RankControl& mine = segment->control(rank);
    mine.closed.value.store(1, std::memory_order_release);
    for (Counter* counter : {&mine.arrived, &mine.reduced, &mine.finished}) wake_all(*counter);
  }

  // One operation, unless an earlier one failed the group; completes its work either way.
  void serve(Operation& operation);
  void run(const Operation& operation);
  // A copy chunk by chunk without a reduction: copy_in(slot, byte offset, bytes) fills this rank's
  // slot where it contributes, and once every rank's is labelled and checked, copy_out reads them.
  using ChunkCopy = std::function<void(int, size_t, size_t)>;
  void run_copy(const Operation& operation, int32_t label_op, const char* step, const ChunkCopy& copy_in,
                const ChunkCopy& copy_out);
  void run_gather(const Operation& operation);
  void run_broadcast(const Operation& operation);
  // Returns once every other rank's `counter` has reached `chunk`; throws on timeout, on a peer
  // that exited and on shutdown.
  void wait_for_peers(Counter RankControl::*counter, uint32_t chunk, const char* step, Clock::time_point deadline);
  void check_labels(int slot);
  [[noreturn]] void fail_waiting(int peer, const char* step, const std::string& why);
  // Rank `r` of this group as the job numbers it, for messages.
  int job_rank(int r) const { return options.job_ranks().empty() ? r : options.job_ranks()[r]; }

  std::unique_ptr<Segment> segment;
  const int rank;
  const int world_size;
  const Options options;
  const bool peers_visible;  // their pids can be checked from here (same pid namespace)
  uint64_t chunks = 0;       // chunks moved so far; the same count on every rank

  std::atomic<bool> stopping{false};
  std::exception_ptr broken;  // the failure that ended this group; every later operation gets it
  ServedQueue<Operation> operations;  // last: its thread starts once everything above exists
};

void Allreduce::State::serve(Operation& operation) {
  if (!broken) {
    try {
      switch (operation.kind) {
        case Kind::Reduce: run(operation); break;
        case Kind::Gather: run_gather(operation); break;
        case Kind::Broadcast: run_broadcast(operation); break;
      }
    } catch (...) {
      broken = std::current_exception();
    }
  }
  operation.work->complete(broken);
}

void Allreduce::State::run(const Operation& operation) {
  const auto deadline = Clock::now() + options.timeout();
  const at::Tensor& tensor = operation.tensor;
  const size_t element = tensor.element_size();
  const int64_t numel = tensor.numel();
  const int64_t chunk_elements = static_cast<int64_t>(segment->slot_bytes() / element);
  const int64_t align = std::max<int64_t>(1, 64 / static_cast<int64_t>(element));  // parts start on cache lines
  char* data = static_cast<char*>(tensor.data_ptr());
  RankControl& mine = segment->control(rank);
  std::vector<const char*> inputs(world_size);  // this rank's part of the chunk, from every rank

  for (int64_t offset = 0; offset < numel; offset += chunk_elements) {
    const int64_t count = std::min(chunk_elements, numel - offset);
    const uint64_t chunk = ++chunks;
    const uint32_t number = static_cast<uint32_t>(chunk);
    const int slot = static_cast<int>(chunk & 1);
    // Rank r reduces elements [bound(r), bound(r + 1)) of the chunk: part r, at part(base, r) in
    // the chunk's values or in a slot, part_bytes(r) long.
    auto bound = [&](int r) { return r == world_size ? count : count * r / world_size / align * align; };
    auto part = [&](char* base, int r) { return base + bound(r) * element; };
    auto part_bytes = [&](int r) { return (bound(r + 1) - bound(r)) * element; };
    char* values = data + offset * element;
    char* own_slot = segment->slot(rank, slot);

    // 1. Copy in the parts the other ranks reduce (this rank reads its own part from the tensor),
    //    once every rank has finished the chunk that used this slot before.
    if (chunk > 2) wait_for_peers(&RankControl::finished, number - 2, "finish the chunk before last", deadline);
    for (int r = 0; r < world_size; ++r) {
      if (r != rank) std::memcpy(part(own_slot, r), part(values, r), part_bytes(r));
    }
    mine.labels[slot] = ChunkLabel{static_cast<uint64_t>(numel), static_cast<uint64_t>(offset), operation.step,
                                   static_cast<int32_t>(tensor.scalar_type()), static_cast<int32_t>(operation.op),
                                   operation.root};
    publish(mine.arrived, number);
    wait_for_peers(&RankControl::arrived, number, "start the same all_reduce", deadline);
    check_labels(slot);

    // 2. Reduce this rank's part, its own values from the tensor and the others' from their slots,
    //    into its slot (the others copy it out from there) and into the tensor, in one pass.
    for (int r = 0; r < world_size; ++r) inputs[r] = part(r == rank ? values : segment->slot(r, slot), rank);
    const int64_t count_here = bound(rank + 1) - bound(rank);
    if (tensor.scalar_type() == at::kDouble) {
      reduce_parts<double>(part(own_slot, rank), part(values, rank), inputs, count_here, operation.op);
    } else {
      reduce_parts<float>(part(own_slot, rank), part(values, rank), inputs, count_here, operation.op);
    }
    publish(mine.reduced, number);

    // 3. Copy out the other ranks' parts (a reduce to a root: the root only).
    wait_for_peers(&RankControl::reduced, number, "reduce its part", deadline);
    for (int r = 0; r < world_size && (operation.root < 0 || rank == operation.root); ++r) {
      if (r != rank) std::memcpy(part(values, r), part(segment->slot(r, slot), r), part_bytes(r));
    }
    publish(mine.finished, number);
  }
}

void Allreduce::State::run_copy(const Operation& operation, int32_t label_op, const char* step,
                                const ChunkCopy& copy_in, const ChunkCopy& copy_out) {
  const auto deadline = Clock::now() + options.timeout();
  const at::Tensor& tensor = operation.tensor;
  const size_t element = tensor.element_size();
  const int64_t numel = tensor.numel();
  const int64_t chunk_elements = static_cast<int64_t>(segment->slot_bytes() / element);
  RankControl& mine = segment->control(rank);
  for (int64_t offset = 0; offset < numel; offset += chunk_elements) {
    const size_t bytes = static_cast<size_t>(std::min(chunk_elements, numel - offset)) * element;
    const uint64_t chunk = ++chunks;
    const uint32_t number = static_cast<uint32_t>(chunk);
    const int slot = static_cast<int>(chunk & 1);
    // 1. Copy in, once every rank has finished the chunk that used this slot. Every rank labels
    //    its slot, whether it copied or not, so that every rank checks what every other one started.
    if (chunk > 2) wait_for_peers(&RankControl::finished, number - 2, "finish the chunk before last", deadline);
    copy_in(slot, offset * element, bytes);
    mine.labels[slot] = ChunkLabel{static_cast<uint64_t>(numel), static_cast<uint64_t>(offset), operation.step,
                                   static_cast<int32_t>(tensor.scalar_type()), label_op, operation.root};
    publish(mine.arrived, number);
    wait_for_peers(&RankControl::arrived, number, step, deadline);
    check_labels(slot);
    // 2. Copy out. `reduced` moves on too, so that every counter keeps the chunk count whichever
    //    operations follow.
    copy_out(slot, offset * element, bytes);
    publish(mine.reduced, number);
    publish(mine.finished, number);
  }
}

void Allreduce::State::run_gather(const Operation& operation) {
  const char* own = static_cast<const char*>(operation.tensor.data_ptr());
  char* gathered = static_cast<char*>(operation.gathered.data_ptr());
  const size_t input_bytes = operation.tensor.nbytes();
  run_copy(
      operation, kGatherOp, "start the same all_gather",
      [&](int slot, size_t at, size_t bytes) { std::memcpy(segment->slot(rank, slot), own + at, bytes); },
      [&](int slot, size_t at, size_t bytes) {  // every rank's part, this rank's from its input
        for (int r = 0; r < world_size; ++r) {
          std::memcpy(gathered + r * input_bytes + at, r == rank ? own + at : segment->slot(r, slot), bytes);
        }
      });
}

void Allreduce::State::run_broadcast(const Operation& operation) {
  char* data = static_cast<char*>(operation.tensor.data_ptr());
  const int root = operation.root;
  run_copy(
      operation, kBroadcastOp, "start the same broadcast",
      [&](int slot, size_t at, size_t bytes) {
        if (rank == root) std::memcpy(segment->slot(rank, slot), data + at, bytes);
      },
      [&](int slot, size_t at, size_t bytes) {
        if (rank != root) std::memcpy(data + at, segment->slot(root, slot), bytes);
      });
}

void Allreduce::State::wait_for_peers(Counter RankControl::*counter, uint32_t chunk, const char* step,
                                      Clock::time_point deadline) {
  for (int peer = 0; peer < world_size; ++peer) {
    if (peer == rank) continue;
    Counter& awaited = segment->control(peer).*counter;
    for (int spin = 0;; ++spin) {
      const uint32_t seen = awaited.value.load(std::memory_order_acquire);
      if (reached(seen, chunk)) break;
      if (spin < kSpins) {
        cpu_relax();
        continue;
      }
      if (stopping) fail_waiting(peer, step, "this rank's communicator was shut down");
      if (segment->control(peer).closed.value.load(std::memory_order_acquire) != 0) {
        fail_waiting(peer, step,
                     str("rank ", job_rank(peer),
                         " has closed its communicator: it left the job or failed; "
                         "its own output says why"));
      }
      const int32_t pid = segment->control(peer).pid;
      if (peers_visible && kill(pid, 0) != 0 && errno == ESRCH) {
        fail_waiting(peer, step, str("rank ", job_rank(peer), " (pid ", pid, ") has exited; its own output says why"));
      }
      const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(deadline - Clock::now());
      if (left.count() <= 0) {
        throw TimeoutError(str("rank ", job_rank(rank), ": all_reduce over shared memory timed out: rank ",
                               job_rank(peer), " did not ", step, " within ", options.timeout().count() / 1000.0,
                               " s. It is stuck, much slower, or gone; check its output."));
      }
      wait_for_change(awaited, seen, std::min(left, kWaitSlice));
    }
  }
}

void Allreduce::State::check_labels(int slot) {
  const ChunkLabel& own = segment->control(rank).labels[slot];
  for (int peer = 0; peer < world_size; ++peer) {
    const ChunkLabel& theirs = segment->control(peer).labels[slot];
    if (theirs == own) continue;
    const auto describe = [this](int r, const ChunkLabel& label) {
      const std::string what =
          label.op == kGatherOp      ? std::string("all_gather")
          : label.op == kBroadcastOp ? str("broadcast from rank ", job_rank(label.root))
          : label.root >= 0 ? str("reduce(", to_string(ReduceOp(label.op)), ") to rank ", job_rank(label.root))
                            : str("all_reduce(", to_string(ReduceOp(label.op)), ")");
      return str("\n    rank ", job_rank(r), ": ", what, " of ", label.numel, " ", at::ScalarType(label.dtype),
                 label.step >= 0 ? str(" step ", label.step) : "");
    };
    throw DistError(
        str("rank ", job_rank(rank), ": all_reduce over shared memory: the ranks disagree on what they reduce: ",
            detail::kDisagreementAdvice, " Each rank's:", describe(std::min(rank, peer), rank < peer ? own : theirs),
            describe(std::max(rank, peer), rank < peer ? theirs : own)));
  }
}

void Allreduce::State::fail_waiting(int peer, const char* step, const std::string& why) {
  throw DistError(str("rank ", job_rank(rank), ": all_reduce over shared memory failed while waiting for rank ",
                      job_rank(peer), " to ", step, ": ", why));
}

size_t default_slot_bytes(int world_size) {
  constexpr size_t kSegmentBudget = size_t{32} << 20;
  constexpr size_t kLargest = size_t{4} << 20;
  const size_t share = kSegmentBudget / (2 * static_cast<size_t>(std::max(world_size, 1)));
  return std::max<size_t>(4096, std::min(kLargest, share / 4096 * 4096));
}

Allreduce::Allreduce(std::unique_ptr<State> state) : state_(std::move(state)) {}

Allreduce::~Allreduce() = default;

bool Allreduce::accepts(const at::Tensor& tensor, ReduceOp op) {
  return tensor.device().is_cpu() && tensor.is_contiguous() && !tensor.is_sparse() &&
         (tensor.scalar_type() == at::kFloat || tensor.scalar_type() == at::kDouble) &&
         (op == ReduceOp::Sum || op == ReduceOp::Mean || op == ReduceOp::Max || op == ReduceOp::Min);
}

compat::WorkPtr Allreduce::all_reduce(at::Tensor tensor, ReduceOp op, int64_t step) {
  DPT_ASSERT(accepts(tensor, op), "shared-memory all_reduce given a tensor or operation it does not take");
  auto work = c10::make_intrusive<CompletingWork>();
  state_->operations.push(State::Operation{State::Kind::Reduce, std::move(tensor), op, step, work, at::Tensor(), -1});
  return work;
}

compat::WorkPtr Allreduce::reduce(at::Tensor tensor, ReduceOp op, int root, int64_t step) {
  DPT_ASSERT(accepts(tensor, op) && root >= 0 && root < state_->world_size,
             "shared-memory reduce given a tensor, operation or root it does not take");
  auto work = c10::make_intrusive<CompletingWork>();
  state_->operations.push(State::Operation{State::Kind::Reduce, std::move(tensor), op, step, work, at::Tensor(), root});
  return work;
}

compat::WorkPtr Allreduce::all_gather(at::Tensor input, at::Tensor output, int64_t step) {
  DPT_ASSERT(accepts(input, ReduceOp::Sum) && output.is_contiguous() && output.scalar_type() == input.scalar_type() &&
                 output.numel() == input.numel() * state_->world_size,
             "shared-memory all_gather given tensors it does not take");
  auto work = c10::make_intrusive<CompletingWork>();
  state_->operations.push(
      State::Operation{State::Kind::Gather, std::move(input), ReduceOp::Sum, step, work, std::move(output), -1});
  return work;
}

compat::WorkPtr Allreduce::broadcast(at::Tensor tensor, int root, int64_t step) {
  DPT_ASSERT(accepts(tensor, ReduceOp::Sum) && root >= 0 && root < state_->world_size,
             "shared-memory broadcast given a tensor or root it does not take");
  auto work = c10::make_intrusive<CompletingWork>();
  state_->operations.push(
      State::Operation{State::Kind::Broadcast, std::move(tensor), ReduceOp::Sum, step, work, at::Tensor(), root});
  return work;
}

namespace {

constexpr const char* kNameKey = "name";

}  // namespace

std::unique_ptr<Allreduce> Allreduce::attach(c10d::Store& store, const WorldInfo& world, const Options& options,
                                             std::string* why_not) {
  DPT_CHECK(world.world_size >= 2, ConfigError, "shared-memory all_reduce needs at least two ranks");
  const size_t slot_bytes = options.slot_bytes().value_or(default_slot_bytes(world.world_size));
  DPT_CHECK(slot_bytes >= 4096 && slot_bytes % 64 == 0, ConfigError,
            "shared-memory slot_bytes must be a multiple of 64, at least 4096; got ", slot_bytes);
  std::string why;
  std::unique_ptr<Segment> segment;
  std::string name;
  try {
    if (world.rank == 0) {
      name = Segment::unique_name();
      segment = Segment::create(name, world.world_size, slot_bytes, why);
      write_text(store, kNameKey, segment ? name : std::string());
    } else {
      store.wait({kNameKey}, options.timeout());
      name = read_text(store, kNameKey);
      if (name.empty()) {
        why = "rank 0 could not create the segment";
      } else {
        segment = Segment::open(name, world.world_size, slot_bytes, why);
      }
    }
    if (segment) segment->control(world.rank).pid = static_cast<int32_t>(getpid());
    // Every rank reads every answer, so all of them take the same transport: the first rank's
    // failure, this one's included, read back like the others.
    why = first_refusal(store, "attached", world.rank, world.world_size, segment ? std::string() : why,
                        options.timeout());
  } catch (const std::exception& e) {
    if (world.rank == 0 && segment) shm_unlink(name.c_str());
    throw DistError(str("rank ", world.rank, ": setting up shared memory with the other ranks through the store "
                        "failed: ", e.what(), ". A rank is missing or much slower; check the other ranks' output."));
  }
  if (world.rank == 0 && !name.empty() && segment) shm_unlink(name.c_str());  // every rank has answered
  if (!why.empty()) {
    if (why_not) *why_not = why;
    return nullptr;
  }
  bool peers_visible = true;
  for (int r = 0; r < world.world_size; ++r) {
    const int32_t pid = segment->control(r).pid;
    peers_visible = peers_visible && pid > 0 && (kill(pid, 0) == 0 || errno == EPERM);
  }
  return std::unique_ptr<Allreduce>(
      new Allreduce(std::make_unique<State>(std::move(segment), world, options, peers_visible)));
}

}  // namespace dpt::dist::transport::shm
