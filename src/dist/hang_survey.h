#pragma once
// After a collective timed out on this rank: which ranks never reached it. Private to the dist layer.
//
// A timed-out wait only knows that a peer did not deliver; with a ring or tree algorithm that peer
// may itself be waiting for a third rank. So every rank whose collective times out publishes how
// far it got (the collective's sequence number) in the rendezvous store and reads what the others
// published for a short while. A rank that publishes nothing is stopped (SIGSTOP, a debugger),
// stuck outside collectives (a loop, a deadlock, a slow file system) or gone; one that publishes a
// lower number is stuck in an earlier collective; one with a higher number is ahead of this rank.
//
// The store may be served by the very rank that hangs (rank 0 serves it for env:// and tcp://), so
// the exchange runs on its own thread and is abandoned, and said so, when it does not finish in time.

#include <chrono>
#include <cstdint>
#include <string>

#include "dptrain/compat/compat.h"

namespace dpt::dist::detail {

struct SurveyOptions {
  int rank = 0;
  int world_size = 1;
  uint64_t seq = 0;          // the collective that timed out here
  std::string operation;     // its name, for the others' messages
  std::chrono::milliseconds grace{5000};  // how long to wait for the others' reports
};

// A sentence for the failure message naming the ranks that did not arrive (or that were behind or
// ahead), or saying that every rank reached the collective; never throws.
std::string survey_ranks(const compat::StorePtr& store, const SurveyOptions& options);

}  // namespace dpt::dist::detail
