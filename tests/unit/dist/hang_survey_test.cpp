// The survey a rank runs after a collective timed out (src/dist/hang_survey.h), over an in-memory
// store, with each rank a thread that reports the collective it was stuck in.
#include "dist/hang_survey.h"

#include <map>
#include <thread>

#include <gtest/gtest.h>
#include <torch/csrc/distributed/c10d/HashStore.hpp>

using dpt::dist::detail::survey_ranks;
using dpt::dist::detail::SurveyOptions;

namespace {

struct Stuck {
  uint64_t seq;
  std::string operation;
};

// Runs the survey on every rank in `stuck` (the others never report); returns each one's sentence.
std::map<int, std::string> survey(int world_size, const std::map<int, Stuck>& stuck) {
  auto store = c10::make_intrusive<c10d::HashStore>();
  std::map<int, std::string> said;
  std::map<int, std::thread> threads;
  for (const auto& [rank, where] : stuck) said[rank];
  for (const auto& [rank, where] : stuck) {
    threads[rank] = std::thread([&, rank = rank, where = where] {
      SurveyOptions options;
      options.rank = rank;
      options.world_size = world_size;
      options.seq = where.seq;
      options.operation = where.operation;
      options.grace = std::chrono::milliseconds(500);
      said[rank] = survey_ranks(store, options);
    });
  }
  for (auto& [rank, thread] : threads) thread.join();
  return said;
}

bool contains(const std::string& text, const std::string& part) { return text.find(part) != std::string::npos; }

}  // namespace

TEST(HangSurvey, NamesTheRanksThatNeverReport) {
  auto said = survey(4, {{0, {7, "all_reduce(sum)"}}, {2, {7, "all_reduce(sum)"}}});
  for (int rank : {0, 2}) {
    EXPECT_TRUE(contains(said[rank], " Ranks 1, 3 did not arrive (or stopped inside it): no report within 0.5 s"))
        << said[rank];
  }
}

TEST(HangSurvey, NamesARankStuckEarlierAndTellsItThatOthersAreAhead) {
  auto said = survey(2, {{0, {7, "all_reduce(sum)"}}, {1, {5, "broadcast"}}});
  EXPECT_EQ(said[0], " Rank 1 is behind, still in collective #5 (broadcast).");
  EXPECT_EQ(said[1], " Rank 0 is ahead, in collective #7 (all_reduce(sum)): this rank fell behind it.");
}

TEST(HangSurvey, NamesRanksInADifferentCollective) {
  auto said = survey(2, {{0, {3, "all_reduce(sum)"}}, {1, {3, "barrier"}}});
  EXPECT_TRUE(contains(said[0], "Rank 1 is in a different collective #3 (barrier)")) << said[0];
}

TEST(HangSurvey, SaysWhenEveryRankReachedTheCollective) {
  auto said = survey(3, {{0, {9, "barrier"}}, {1, {9, "barrier"}}, {2, {9, "barrier"}}});
  for (int rank = 0; rank < 3; ++rank) {
    EXPECT_TRUE(contains(said[rank], "Every rank reached this collective and timed out in it")) << said[rank];
  }
}

TEST(HangSurvey, SaysNothingWithoutAStoreOrPeers) {
  SurveyOptions options;
  EXPECT_EQ(survey_ranks(dpt::compat::StorePtr(), options), "");
  options.world_size = 1;
  EXPECT_EQ(survey_ranks(c10::make_intrusive<c10d::HashStore>(), options), "");
}
