#pragma once
// A ring of this rank's most recent collectives and point-to-point operations, kept by every
// Communicator and printed when one of them fails, so that a hang or a mismatch can be read from
// the logs: which collective each rank was in, how big, for which bucket and step, which peer a
// send or recv waited for, and which ones had completed. PyTorch keeps such a "flight recorder"
// for NCCL; this one records every backend and transport.
//
//   comm->flight_recorder().set_step(global_step);        // the caller's position, recorded with each entry
//   { dpt::dist::CollectiveLabel label("bucket 3");       // names what this thread starts next
//     work = comm->all_reduce_async(bucket); }
//   std::cerr << comm->flight_recorder().describe();      // one line per entry, oldest first
//
// Recording costs a mutex and a small copy per collective, nothing per element.

#include <chrono>
#include <cstdint>
#include <mutex>
#include <optional>
#include <string>
#include <vector>

#include <ATen/ATen.h>

namespace dpt::dist {

struct CollectiveRecord {
  enum class State { Started, Completed, Failed };
  using Clock = std::chrono::steady_clock;

  // Collectives: 1 for this communicator's first collective, equal on every rank. Point-to-point
  // operations are counted apart (1 for the first send or recv), so that a rank's sends never
  // shift its collectives' numbers away from those of ranks that sent nothing.
  uint64_t seq = 0;
  int peer = -1;           // the other rank of a send or recv; -1 for a collective
  std::string operation;   // "all_reduce(sum)", "broadcast", "send", "recv", ...
  std::string label;       // the innermost CollectiveLabel when it started ("bucket 3"), or empty
  std::vector<int64_t> shape;
  at::ScalarType dtype = at::kFloat;
  int64_t step = -1;       // FlightRecorder::set_step when it started; -1 before any
  Clock::time_point started;
  Clock::time_point ended;  // when it completed or failed
  State state = State::Started;
  // Started under AgreementImplied: no agreement check of its own (transport.h's check_agreement).
  bool agreement_implied = false;

  bool point_to_point() const { return peer >= 0; }
  // What every rank's record of the same collective must say: "#57 all_reduce(sum) bucket 3
  // [2785354] Float step 12" (without the step when `with_step` is false, or when it is unset).
  std::string identity(bool with_step = true) const;

  // identity() and the state: "#57 all_reduce(sum) bucket 3 [2785354] Float step 12: completed in 1.2 ms",
  // "p2p #4 send to rank 2 bucket 3 of step 12 [1032] Float step 12: started 30001.2 ms ago, not completed"
  std::string describe(Clock::time_point now) const;
};

class FlightRecorder {
 public:
  explicit FlightRecorder(size_t capacity = 16);
  FlightRecorder(const FlightRecorder&) = delete;
  FlightRecorder& operator=(const FlightRecorder&) = delete;

  // Records a collective that starts now on `tensor` (undefined for a barrier), or with `peer` a
  // send or recv with that rank. Returns the entry's id, which end() and entry() take (for a
  // collective it is not its seq), and gives the entry in `*copy` when set (entry() may no longer
  // have it by the time it is asked, when other threads start many operations at once).
  uint64_t start(std::string operation, const at::Tensor& tensor, int peer = -1, CollectiveRecord* copy = nullptr);
  // Marks entry `id` completed or failed; a no-op once it has left the ring.
  void end(uint64_t id, CollectiveRecord::State state);
  // Entry `id`, if it is still in the ring.
  std::optional<CollectiveRecord> entry(uint64_t id) const;

  // The caller's position (a training step), stored with the entries that start after it; -1: none
  // (a rank that joined, dpt::Join, follows the others' steps without knowing them).
  void set_step(int64_t step);

  // The entries still in the ring, oldest first.
  std::vector<CollectiveRecord> records() const;
  // One line per entry, oldest first, each prefixed with `indent`.
  std::string describe(const std::string& indent = "  ") const;

 private:
  mutable std::mutex mutex_;
  size_t capacity_;
  struct Slot {
    uint64_t id = 0;  // entries are numbered 1, 2, ... in the order they started
    CollectiveRecord record;
  };
  std::vector<Slot> ring_;  // entry k at (k - 1) % capacity_
  uint64_t last_id_ = 0;
  uint64_t last_collective_ = 0;
  uint64_t last_point_to_point_ = 0;
  int64_t step_ = -1;
};

// Names the collectives this thread starts while it lives (innermost wins), for the flight recorder
// and for failure messages: the reducer labels each bucket. Thread-local, because reductions start
// on autograd's threads as well as on the caller's.
class CollectiveLabel {
 public:
  explicit CollectiveLabel(std::string label);
  ~CollectiveLabel();
  CollectiveLabel(const CollectiveLabel&) = delete;
  CollectiveLabel& operator=(const CollectiveLabel&) = delete;

  // The innermost label alive on this thread, or empty.
  static const std::string& current();

 private:
  std::string previous_;
};

// While it lives, the collectives this thread starts skip the agreement check of their own: for a
// collective that follows from one already checked, whose shape and place every rank derives from
// that one (PowerSGD's Q, after its bucket's P). The check costs a blocking round trip per
// collective. Thread-local, as CollectiveLabel.
class AgreementImplied {
 public:
  AgreementImplied();
  ~AgreementImplied();
  AgreementImplied(const AgreementImplied&) = delete;
  AgreementImplied& operator=(const AgreementImplied&) = delete;

  // Whether one is alive on this thread.
  static bool active();

 private:
  bool previous_;
};

}  // namespace dpt::dist
