#include "dptrain/dist/flight_recorder.h"

#include <thread>

#include <gtest/gtest.h>

using dpt::dist::CollectiveLabel;
using dpt::dist::CollectiveRecord;
using dpt::dist::FlightRecorder;

TEST(FlightRecorder, KeepsTheNewestEntriesOldestFirst) {
  FlightRecorder recorder(3);
  for (int i = 0; i < 5; ++i) recorder.start("all_reduce(sum)", at::zeros({i + 1}));
  const auto records = recorder.records();
  ASSERT_EQ(records.size(), 3u);
  EXPECT_EQ(records[0].seq, 3u);
  EXPECT_EQ(records[2].seq, 5u);
  EXPECT_EQ(records[2].shape, std::vector<int64_t>{5});
}

TEST(FlightRecorder, RecordsStateStepAndLabel) {
  FlightRecorder recorder(4);
  recorder.set_step(12);
  const uint64_t done = recorder.start("broadcast", at::zeros({2, 3}, at::kLong));
  uint64_t failed = 0;
  {
    CollectiveLabel bucket("bucket 3");
    failed = recorder.start("all_reduce(mean)", at::zeros({7}));
  }
  const uint64_t open = recorder.start("barrier", at::Tensor());
  recorder.end(done, CollectiveRecord::State::Completed);
  recorder.end(failed, CollectiveRecord::State::Failed);
  const auto records = recorder.records();
  ASSERT_EQ(records.size(), 3u);
  EXPECT_EQ(records[0].state, CollectiveRecord::State::Completed);
  EXPECT_EQ(records[0].dtype, at::kLong);
  EXPECT_EQ(records[1].label, "bucket 3");
  EXPECT_EQ(records[1].state, CollectiveRecord::State::Failed);
  EXPECT_EQ(records[2].seq, open);
  EXPECT_EQ(records[2].label, "");  // the label ended with its scope
  EXPECT_EQ(records[2].step, 12);
  const std::string text = recorder.describe();
  EXPECT_NE(text.find("  #1 broadcast [2, 3] Long step 12: completed in "), std::string::npos) << text;
  EXPECT_NE(text.find("  #2 all_reduce(mean) bucket 3 [7] Float step 12: FAILED after "), std::string::npos) << text;
  EXPECT_NE(text.find("  #3 barrier step 12: started "), std::string::npos) << text;
}

TEST(FlightRecorder, CountsPointToPointApartSoCollectivesKeepTheirNumbers) {
  FlightRecorder recorder(8);
  const uint64_t reduce = recorder.start("all_reduce(sum)", at::zeros({4}));
  const uint64_t send = recorder.start("send", at::zeros({3}), /*peer=*/2);
  recorder.start("recv", at::zeros({3}), /*peer=*/1);
  recorder.start("barrier", at::Tensor());
  recorder.end(send, CollectiveRecord::State::Completed);
  const auto records = recorder.records();
  ASSERT_EQ(records.size(), 4u);
  // The barrier is collective #2 on every rank, whatever this rank sent in between.
  EXPECT_EQ(records[3].seq, 2u);
  EXPECT_FALSE(records[3].point_to_point());
  EXPECT_EQ(records[1].seq, 1u);
  EXPECT_EQ(records[1].peer, 2);
  EXPECT_EQ(records[2].seq, 2u);
  ASSERT_TRUE(recorder.entry(send).has_value());
  EXPECT_EQ(recorder.entry(send)->state, CollectiveRecord::State::Completed);
  EXPECT_EQ(recorder.entry(reduce)->operation, "all_reduce(sum)");
  const std::string text = recorder.describe();
  EXPECT_NE(text.find("  p2p #1 send to rank 2 [3] Float: completed in "), std::string::npos) << text;
  EXPECT_NE(text.find("  p2p #2 recv from rank 1 [3] Float: started "), std::string::npos) << text;
  EXPECT_NE(text.find("  #2 barrier: started "), std::string::npos) << text;
}

TEST(FlightRecorder, EndingAnEntryThatLeftTheRingIsANoOp) {
  FlightRecorder recorder(2);
  const uint64_t first = recorder.start("barrier", at::Tensor());
  recorder.start("barrier", at::Tensor());
  recorder.start("barrier", at::Tensor());
  recorder.end(first, CollectiveRecord::State::Failed);
  for (const auto& record : recorder.records()) EXPECT_EQ(record.state, CollectiveRecord::State::Started);
  EXPECT_FALSE(recorder.entry(first).has_value());
}

TEST(CollectiveLabel, NestsAndIsPerThread) {
  CollectiveLabel outer("outer");
  {
    CollectiveLabel inner("inner");
    EXPECT_EQ(CollectiveLabel::current(), "inner");
    std::string seen_elsewhere = "unset";
    std::thread([&] { seen_elsewhere = CollectiveLabel::current(); }).join();
    EXPECT_EQ(seen_elsewhere, "");
  }
  EXPECT_EQ(CollectiveLabel::current(), "outer");
}

// A collective started under AgreementImplied is marked so (the Gloo transport then skips its own
// agreement round trip); the mark ends with the scope, and a nested scope keeps it.
TEST(FlightRecorder, MarksCollectivesWhoseAgreementIsImplied) {
  FlightRecorder recorder(4);
  recorder.start("all_reduce(sum)", at::zeros({3}));
  {
    const dpt::dist::AgreementImplied outer;
    {
      const dpt::dist::AgreementImplied inner;
      recorder.start("all_reduce(sum)", at::zeros({3}));
    }
    recorder.start("all_reduce(sum)", at::zeros({3}));
  }
  recorder.start("all_reduce(sum)", at::zeros({3}));
  std::vector<bool> implied;
  for (const auto& record : recorder.records()) implied.push_back(record.agreement_implied);
  EXPECT_EQ(implied, (std::vector<bool>{false, true, true, false}));
}
