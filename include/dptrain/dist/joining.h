#pragma once
// How a replacement joins a group that went on without a lost rank (--on-failure continue), at a
// step boundary, through the job's store: the replacement asks, the running group's rank 0 sees
// the asks between steps and tells every rank in the step's summed metrics (so all of them admit
// at the same boundary without a collective of their own), then writes each replacement its
// ticket, and the grown group forms (init.h's grow and join_running_group).
//
//   // the replacement (init.h's join_running_group does this):
//   int64_t ask = dpt::dist::ask_to_join(*store, /*slot=*/2, proof);
//   std::optional<JoinTicket> ticket = dpt::dist::wait_for_ticket(*store, ask, timeout);
//   // the running group, at a step boundary:
//   int64_t asked = dpt::dist::join_requests(*store);      // rank 0, before the step's sums
//   // after them, every rank knows `asked`; rank 0 checks each ask's proof and admits:
//   for (auto& ask : dpt::dist::requests_between(*store, seen, asked)) ...refuse(*store, ask.number, why)
//   dpt::dist::issue_tickets(*store, ticket, seen);        // rank 0
//   JoinTicket ticket = dpt::dist::ticket_for(*store, asked);   // the others
//
// A replacement's slot is the rank it replaces in the group the job started with: it names its
// files, as the ranks that went on keep naming theirs by their first rank. As the run ends, rank 0
// closes the joining: a replacement still waiting leaves at once instead of waiting out its bound.

#include <chrono>
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "dptrain/common/error.h"
#include "dptrain/compat/compat.h"

namespace dpt::dist {

// The run a replacement asked to join ended before admitting it: nothing failed, and the
// replacement has nothing left to do (init.h's join_running_group).
class RunEnded : public Error {
 public:
  using Error::Error;
};

// What rank 0 writes for the replacements it admits, the same for each of them.
struct JoinTicket {
  int generation = 0;         // the group's re-formations so far, this one included (its name)
  int64_t requests = 0;       // the asks admitted so far, these included
  std::vector<int> members;   // the grown group's slots, in rank order (the replacements last)

  std::string encode() const;
  static JoinTicket decode(const std::string& text);
};

// One replacement's ask.
struct JoinRequest {
  int64_t number = 0;  // the asks' count when it asked (from 1)
  int slot = 0;        // the rank it replaces in the group the job started with
  std::string proof;   // that it holds the job's token (admission.h), empty without one
};

// The replacement's side: asks to join in place of `slot`; returns the ask's number.
int64_t ask_to_join(c10d::Store& store, int slot, const std::string& proof);
// Waits within `timeout` for the ticket of ask `number`; nothing when the run has ended (the
// joining closed). TimeoutError past the bound; DistError when rank 0 refused the ask.
std::optional<JoinTicket> wait_for_ticket(c10d::Store& store, int64_t number, std::chrono::milliseconds timeout);

// The running group's side. How many replacements have asked so far (one store read: rank 0
// reads it each step).
int64_t join_requests(c10d::Store& store);
// The asks after the first `seen`, up to `asked`, in order.
std::vector<JoinRequest> requests_between(c10d::Store& store, int64_t seen, int64_t asked);
// Rank 0: turns ask `number` away (its proof does not hold), telling the replacement `why`.
void refuse(c10d::Store& store, int64_t number, const std::string& why);
// Rank 0: gives the asks after the first `seen` (up to ticket.requests) that it did not refuse
// their ticket, and the others theirs (ticket_for).
void issue_tickets(c10d::Store& store, const JoinTicket& ticket, int64_t seen);
// The others: the ticket rank 0 issued when `requests` had asked (waits for it within the store's
// timeout).
JoinTicket ticket_for(c10d::Store& store, int64_t requests);
// The name of the group grown at re-formation `generation` (init.h's grow), alike on every member.
inline std::string grown_group_name(int generation) { return "grown" + std::to_string(generation); }
// What a replacement proves it holds the job's token for (admission.h's proof and verify).
inline std::string replacement_place(int slot) { return "replacement of rank " + std::to_string(slot); }

// Rank 0, as the run ends: whoever waits for a ticket, or asks later, is told the run is over.
void close_joining(c10d::Store& store);

}  // namespace dpt::dist
