#pragma once
// The /dev/shm segment a group of ranks on one host shares (allreduce.cpp moves its chunks through
// it), as each rank maps it:
//
//   [header: magic, world size, slot size][rank 0's control] ... [rank N-1's control]
//   (page boundary) [rank 0's slot 0][rank 0's slot 1] ... [rank N-1's slot 1]
//
// A rank's control holds counters that it alone writes and every rank reads: the number of the
// last chunk that reached a step. Ranks wait for each other's counters on futexes, which work
// across processes on a shared mapping.

#include <atomic>
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>

namespace dpt::dist::transport::shm {

static_assert(std::atomic<uint32_t>::is_always_lock_free, "shared-memory counters must be lock-free");

// One counter per cache line: each rank writes its own, every rank reads them all. Chunk numbers
// wrap at 2^32 (reached() compares them as such).
struct alignas(64) Counter {
  std::atomic<uint32_t> value{0};
};

// Stores `chunk` and wakes every process waiting on the counter.
void publish(Counter& counter, uint32_t chunk);
// Wakes every process waiting on the counter, whose value changed otherwise.
void wake_all(Counter& counter);
// Sleeps until the counter no longer holds `seen`, or `timeout` has passed, or a signal came; the
// caller looks at the counter again whichever it was.
void wait_for_change(Counter& counter, uint32_t seen, std::chrono::milliseconds timeout);

// Whether a counter holding `value` has reached chunk `target` (modulo 2^32).
inline bool reached(uint32_t value, uint32_t target) { return static_cast<int32_t>(value - target) >= 0; }

// ChunkLabel::op of an all_gather's and of a broadcast's chunks (the ReduceOp values are 0 and up).
constexpr int32_t kGatherOp = -1;
constexpr int32_t kBroadcastOp = -2;

// What a rank placed in one of its slots: every rank checks that all of them reduce the same thing.
// A rank that skipped a collective reduces its next one with the others' current one: same size,
// another step.
struct ChunkLabel {
  uint64_t numel = 0;   // of the whole tensor
  uint64_t offset = 0;  // of this chunk in it
  int64_t step = -1;    // the caller's (FlightRecorder::set_step), or -1
  int32_t dtype = 0;
  int32_t op = 0;
  int32_t root = -1;  // a broadcast's

  // A step of -1 (none: a rank that joined, dpt::Join) agrees with any.
  bool operator==(const ChunkLabel& other) const {
    return numel == other.numel && offset == other.offset && dtype == other.dtype && op == other.op &&
           root == other.root && (step == other.step || step < 0 || other.step < 0);
  }
};

// A rank's part of the segment's control area. The counters hold chunk numbers.
struct alignas(64) RankControl {
  Counter arrived;   // the last chunk this rank copied into its slot
  Counter reduced;   // the last chunk whose part this rank reduced
  Counter finished;  // the last chunk this rank copied out completely (its slots may be reused)
  Counter closed;    // 1 once this rank's communicator is gone
  ChunkLabel labels[2];  // per slot
  int32_t pid = 0;
};

// This rank's mapping of the segment, unmapped with it. Rank 0 unlinks the name as soon as every
// rank has mapped it, so nothing is left in /dev/shm whatever happens later.
class Segment {
 public:
  // A name that no other segment on this host has.
  static std::string unique_name();
  // Rank 0: creates, sizes and maps segment `name` for `world_size` ranks with slots of
  // `slot_bytes`. Returns null with the reason in `why`.
  static std::unique_ptr<Segment> create(const std::string& name, int world_size, size_t slot_bytes,
                                         std::string& why);
  // Every other rank: maps rank 0's segment and checks that it is the one described. Returns null
  // with the reason in `why`.
  static std::unique_ptr<Segment> open(const std::string& name, int world_size, size_t slot_bytes, std::string& why);

  ~Segment();
  Segment(const Segment&) = delete;
  Segment& operator=(const Segment&) = delete;

  RankControl& control(int rank);
  char* slot(int rank, int which) { return base_ + data_offset_ + (2 * rank + which) * slot_bytes_; }
  size_t slot_bytes() const { return slot_bytes_; }

 private:
  Segment(void* base, int world_size, size_t slot_bytes);

  char* base_;
  size_t data_offset_;
  size_t bytes_;
  size_t slot_bytes_;
};

}  // namespace dpt::dist::transport::shm
