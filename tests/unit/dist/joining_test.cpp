// How a replacement joins a running group (dist/joining.h): asks, tickets, refusals and the
// run's end, over an in-memory store.
#include "dptrain/dist/joining.h"

#include <future>
#include <string>
#include <vector>

#include <gtest/gtest.h>
#include <torch/csrc/distributed/c10d/HashStore.hpp>

#include "dptrain/common/error.h"

using namespace dpt::dist;
using std::chrono::milliseconds;

namespace {

constexpr milliseconds kLong{60000};

std::future<std::optional<JoinTicket>> wait_async(c10d::Store& store, int64_t number) {
  return std::async(std::launch::async, [&store, number] { return wait_for_ticket(store, number, kLong); });
}

}  // namespace

TEST(Joining, TicketsReadBackAndGarbageIsNamed) {
  JoinTicket ticket;
  ticket.generation = 3;
  ticket.requests = 2;
  ticket.members = {0, 3, 2, 1};
  const JoinTicket back = JoinTicket::decode(ticket.encode());
  EXPECT_EQ(back.generation, 3);
  EXPECT_EQ(back.requests, 2);
  EXPECT_EQ(back.members, (std::vector<int>{0, 3, 2, 1}));
  EXPECT_THROW(JoinTicket::decode("not a ticket"), dpt::DistError);
  EXPECT_THROW(JoinTicket::decode("1 1"), dpt::DistError);  // no members
}

TEST(Joining, AsksAreCountedAndEachGetsTheTicketOfItsAdmission) {
  c10d::HashStore store;
  EXPECT_EQ(join_requests(store), 0);
  const int64_t first = ask_to_join(store, 2, "proof-a");
  const int64_t second = ask_to_join(store, 1, "");
  EXPECT_EQ(first, 1);
  EXPECT_EQ(second, 2);
  EXPECT_EQ(join_requests(store), 2);
  // Rank 0 saw the first ask at one step and admitted it; the second came later.
  const auto asks = requests_between(store, 0, 1);
  ASSERT_EQ(asks.size(), 1u);
  EXPECT_EQ(asks[0].number, 1);
  EXPECT_EQ(asks[0].slot, 2);
  EXPECT_EQ(asks[0].proof, "proof-a");
  auto waiting_first = wait_async(store, first);
  auto waiting_second = wait_async(store, second);
  JoinTicket grown;
  grown.generation = 2;
  grown.requests = 1;
  grown.members = {0, 1, 2};
  issue_tickets(store, grown, 0);
  EXPECT_EQ(waiting_first.get()->members, (std::vector<int>{0, 1, 2}));
  EXPECT_EQ(ticket_for(store, 1).generation, 2);  // what the other ranks read
  EXPECT_EQ(waiting_second.wait_for(milliseconds(100)), std::future_status::timeout);  // not yet admitted
  const auto later = requests_between(store, 1, 2);
  ASSERT_EQ(later.size(), 1u);
  EXPECT_EQ(later[0].slot, 1);
  EXPECT_TRUE(later[0].proof.empty());
  grown.generation = 3;
  grown.requests = 2;
  grown.members = {0, 1, 2, 1};
  issue_tickets(store, grown, 1);
  EXPECT_EQ(waiting_second.get()->generation, 3);
}

TEST(Joining, ARefusedAskIsToldWhyAndTheOthersAreStillAdmitted) {
  c10d::HashStore store;
  const int64_t stranger = ask_to_join(store, 1, "forged");
  const int64_t genuine = ask_to_join(store, 2, "good");
  refuse(store, stranger, "it does not hold the job's token");
  JoinTicket ticket;
  ticket.generation = 1;
  ticket.requests = 2;
  ticket.members = {0, 1, 2};
  issue_tickets(store, ticket, 0);  // leaves the refusal in place
  try {
    wait_for_ticket(store, stranger, kLong);
    FAIL() << "a refused ask was admitted";
  } catch (const dpt::DistError& e) {
    EXPECT_NE(std::string(e.what()).find("refused this replacement: it does not hold the job's token"),
              std::string::npos)
        << e.what();
  }
  EXPECT_EQ(wait_for_ticket(store, genuine, kLong)->requests, 2);
}

TEST(Joining, AReplacementLeavesWhenTheRunEndsAndIsBoundedOtherwise) {
  c10d::HashStore store;
  const int64_t number = ask_to_join(store, 1, "");
  try {
    wait_for_ticket(store, number, milliseconds(50));
    FAIL() << "an unanswered ask did not time out";
  } catch (const dpt::TimeoutError& e) {
    EXPECT_NE(std::string(e.what()).find("had no answer within 0.05 s"), std::string::npos) << e.what();
  }
  auto waiting = wait_async(store, number);
  close_joining(store);
  EXPECT_FALSE(waiting.get().has_value());
}
