#include "dptrain/dist/joining.h"

#include <sstream>
#include <thread>

#include "dptrain/common/error.h"
#include "dptrain/dist/store_text.h"

namespace dpt::dist {

namespace {

using Clock = std::chrono::steady_clock;

// How often a waiting replacement looks for its ticket.
constexpr std::chrono::milliseconds kTicketPoll{20};

constexpr const char* kAskedKey = "dptrain/join/asked";
constexpr const char* kClosedKey = "dptrain/join/closed";

std::string ask_key(int64_t number) { return str("dptrain/join/ask/", number); }
std::string ticket_key(int64_t number) { return str("dptrain/join/ticket/", number); }
std::string group_ticket_key(int64_t requests) { return str("dptrain/join/group/", requests); }
constexpr const char* kRefused = "refused: ";

}  // namespace

std::string JoinTicket::encode() const {
  std::string text = str(generation, " ", requests);
  for (int slot : members) text += str(" ", slot);
  return text;
}

JoinTicket JoinTicket::decode(const std::string& text) {
  JoinTicket ticket;
  std::istringstream in(text);
  in >> ticket.generation >> ticket.requests;
  for (int slot; in >> slot;) ticket.members.push_back(slot);
  DPT_CHECK(ticket.generation >= 1 && ticket.requests >= 1 && !ticket.members.empty(), DistError,
            "a join ticket in the job's store does not read (\"", text, "\"): another program wrote there");
  return ticket;
}

int64_t ask_to_join(c10d::Store& store, int slot, const std::string& proof) {
  // The number first, then the ask under it: rank 0 reads an ask only once its number is counted,
  // so it waits (the store's get) for an ask written a moment later.
  const int64_t number = store.add(kAskedKey, 1);
  write_text(store, ask_key(number), str(slot, " ", proof));
  return number;
}

std::optional<JoinTicket> wait_for_ticket(c10d::Store& store, int64_t number, std::chrono::milliseconds timeout) {
  const auto deadline = Clock::now() + timeout;
  const std::string key = ticket_key(number);
  while (true) {
    if (store.check({key})) {
      const std::string text = read_text(store, key);
      DPT_CHECK(text.rfind(kRefused, 0) != 0, DistError, "the running group refused this replacement: ",
                text.substr(std::string(kRefused).size()));
      return JoinTicket::decode(text);
    }
    if (store.check({kClosedKey})) return std::nullopt;
    DPT_CHECK(Clock::now() < deadline, TimeoutError, "a replacement's ask to join (number ", number,
              ") had no answer within ", std::chrono::duration<double>(timeout).count(), " s: the ranks that went ",
              "on admit a replacement after their next completed step, so they have not stepped since (stopped, or ",
              "in a long validation). Raise --rendezvous-timeout, or look at why they do not step");
    std::this_thread::sleep_for(kTicketPoll);
  }
}

int64_t join_requests(c10d::Store& store) { return store.add(kAskedKey, 0); }

std::vector<JoinRequest> requests_between(c10d::Store& store, int64_t seen, int64_t asked) {
  std::vector<JoinRequest> requests;
  for (int64_t number = seen + 1; number <= asked; ++number) {
    JoinRequest request;
    request.number = number;
    std::istringstream in(read_text(store, ask_key(number)));
    in >> request.slot >> request.proof;
    requests.push_back(request);
  }
  return requests;
}

void refuse(c10d::Store& store, int64_t number, const std::string& why) {
  write_text(store, ticket_key(number), kRefused + why);
}

void issue_tickets(c10d::Store& store, const JoinTicket& ticket, int64_t seen) {
  const std::string text = ticket.encode();
  write_text(store, group_ticket_key(ticket.requests), text);
  for (int64_t number = seen + 1; number <= ticket.requests; ++number) {
    if (!store.check({ticket_key(number)})) write_text(store, ticket_key(number), text);
  }
}

JoinTicket ticket_for(c10d::Store& store, int64_t requests) {
  return JoinTicket::decode(read_text(store, group_ticket_key(requests)));
}

void close_joining(c10d::Store& store) { write_text(store, kClosedKey, "1"); }

}  // namespace dpt::dist
