#pragma once
// Lets another thread end this rank's waits on a group whose membership has changed. A stopped
// peer answers nothing, so a collective that waits for it waits for the whole timeout (half an
// hour by default); the heartbeat (heartbeat.h) names such a peer in seconds, and under
// `--on-failure continue` the ranks that remain leave the group and form a new one without it
// (reformation.h). This is how the training thread learns that it must leave.
//
//   auto& abandonment = comm->abandonment();
//   abandonment.arm();                        // from now on, waits look every 100 ms
//   ...another thread: abandonment.abandon("rank 2 is lost");
//   ...the training thread's collective throws GroupAbandoned("rank 2 is lost")
//
// A point-to-point send or receive is never waited in slices, since Gloo closes the pair of one
// whose wait times out: it waits whole, bounded by the communicator's timeout.
// Unarmed (the default), a wait is the backend's own wait, untouched: a slice costs a timed-out
// wait and its exception, paid only by the jobs that may go on without a rank. GroupAbandoned is
// a DistError, so code that does not go on fails as on any lost peer.

#include <atomic>
#include <chrono>
#include <mutex>
#include <string>

#include "dptrain/common/error.h"
#include "dptrain/compat/compat.h"

namespace dpt::dist {

// A collective left because its group's membership changed (Abandonment::abandon).
class GroupAbandoned : public DistError {
 public:
  using DistError::DistError;
};

class Abandonment {
 public:
  // How often an armed wait looks whether it must leave.
  static constexpr std::chrono::milliseconds kSlice{100};

  void arm() { armed_ = true; }
  bool armed() const { return armed_; }
  // Any thread, once; later calls keep the first reason. Every armed wait, now and later, throws.
  void abandon(const std::string& why);
  bool abandoned() const { return abandoned_; }
  void throw_if_abandoned() const;

  // As work->wait(timeout), but armed it throws GroupAbandoned within a slice of abandon().
  void wait(const compat::WorkPtr& work, std::chrono::milliseconds timeout) const;

 private:
  std::atomic<bool> armed_{false};
  std::atomic<bool> abandoned_{false};
  mutable std::mutex mutex_;
  std::string why_;
};

}  // namespace dpt::dist
