#include <gtest/gtest.h>
#include <sys/wait.h>
#include <unistd.h>

#include <functional>
#include <string>
#include <vector>

#include <torch/csrc/distributed/c10d/FileStore.hpp>
#include <torch/csrc/distributed/c10d/HashStore.hpp>
#include <torch/torch.h>

#include "dptrain/common/error.h"
#include "dptrain/dist/transport/shm/allreduce.h"
#include "support/temp_dir.h"
#include "support/thread_ranks.h"

using dpt::dist::ReduceOp;
using SharedMemoryAllreduce = dpt::dist::transport::shm::Allreduce;
using SharedMemoryOptions = dpt::dist::transport::shm::Options;
using dpt::testing::local_world;

namespace {

// `size` ranks as threads attaching to one segment through an in-memory store; body(rank, group)
// runs on each (group is null when attaching failed, with the reason in why_not[rank]).
void run_group(int size, const SharedMemoryOptions& options,
               const std::function<void(int, SharedMemoryAllreduce*)>& body,
               std::vector<std::string>* why_not = nullptr,
               const std::function<SharedMemoryOptions(int)>& options_of = nullptr) {
  auto store = c10::make_intrusive<c10d::HashStore>();
  std::vector<std::string> reasons(size);
  dpt::testing::run_rank_threads(size, [&](int rank) {
    auto group = SharedMemoryAllreduce::attach(*store, local_world(rank, size),
                                               options_of ? options_of(rank) : options, &reasons[rank]);
    body(rank, group.get());
  });
  if (why_not) *why_not = reasons;
}

// What rank r holds before reducing: distinct per rank and element, exact in float.
at::Tensor input_of(int rank, int64_t numel, at::ScalarType dtype) {
  return (torch::arange(numel, torch::kDouble).remainder(1000) * (rank + 1) + rank).to(dtype);
}

}  // namespace

// Sizes around the chunk (4 KiB slots: 1024 floats) and part boundaries, on 2 and 3 ranks; many
// chunks reuse both slots, and the operations queue up behind each other. With 64 KiB slots a
// rank's part spans several of the reduction's blocks (2048 elements), the last one partly.
TEST(SharedMemoryAllreduce, EveryOpOverManyChunksEqualsTheReference) {
  for (auto [size, slot_bytes] : {std::pair{2, 4096}, std::pair{3, 4096}, std::pair{2, 65536}, std::pair{3, 65536}}) {
    run_group(size, SharedMemoryOptions().slot_bytes(slot_bytes), [=](int rank, SharedMemoryAllreduce* group) {
      ASSERT_NE(group, nullptr);
      for (at::ScalarType dtype : {at::kFloat, at::kDouble}) {
        for (int64_t numel : {int64_t{0}, int64_t{1}, int64_t{15}, int64_t{1023}, int64_t{1024}, int64_t{1025},
                              int64_t{100000}}) {
          std::vector<at::Tensor> tensors;
          std::vector<c10::intrusive_ptr<c10d::Work>> works;
          for (ReduceOp op : {ReduceOp::Sum, ReduceOp::Max, ReduceOp::Min, ReduceOp::Mean}) {
            tensors.push_back(input_of(rank, numel, dtype));
            works.push_back(group->all_reduce(tensors.back(), op));
          }
          for (auto& work : works) work->wait();
          at::Tensor sum = torch::zeros({numel}, dtype), max = input_of(size - 1, numel, dtype),
                     min = input_of(0, numel, dtype);
          for (int r = 0; r < size; ++r) sum += input_of(r, numel, dtype);
          const std::string what = "world " + std::to_string(size) + ", " + std::to_string(numel) + " elements, " +
                                   std::to_string(slot_bytes) + "-byte slots";
          EXPECT_TRUE(tensors[0].equal(sum)) << what;
          EXPECT_TRUE(tensors[1].equal(max)) << what;
          EXPECT_TRUE(tensors[2].equal(min)) << what;
          EXPECT_TRUE(tensors[3].equal(sum / size)) << what;  // the sum, divided: as Gloo's sum then a division
        }
      }
    });
  }
}

// all_gather over many chunks (4 KiB slots), queued between all-reduces that use the same slots
// and counters: every rank's input lands in every rank's output, and the reductions around it
// stay right.
TEST(SharedMemoryAllreduce, AllGatherOverManyChunksBetweenReductions) {
  for (int size : {2, 3}) {
    run_group(size, SharedMemoryOptions().slot_bytes(4096), [=](int rank, SharedMemoryAllreduce* group) {
      ASSERT_NE(group, nullptr);
      for (int64_t numel : {int64_t{0}, int64_t{1}, int64_t{1023}, int64_t{1025}, int64_t{5000}}) {
        at::Tensor before = input_of(rank, numel, at::kFloat), after = input_of(rank, numel, at::kFloat);
        at::Tensor gathered = torch::empty({size * numel}, at::kFloat);
        auto first = group->all_reduce(before, ReduceOp::Sum);
        auto gather = group->all_gather(input_of(rank, numel, at::kDouble).to(at::kFloat), gathered);
        auto last = group->all_reduce(after, ReduceOp::Max);
        first->wait();
        gather->wait();
        last->wait();
        at::Tensor sum = torch::zeros({numel}, at::kFloat);
        for (int r = 0; r < size; ++r) {
          sum += input_of(r, numel, at::kFloat);
          EXPECT_TRUE(gathered.narrow(0, r * numel, numel).equal(input_of(r, numel, at::kFloat)))
              << "rank " << r << "'s part, " << numel << " elements";
        }
        EXPECT_TRUE(before.equal(sum)) << numel;
        EXPECT_TRUE(after.equal(input_of(size - 1, numel, at::kFloat))) << numel;
      }
    });
  }
}

// reduce to a root and broadcast from it over many chunks, each root in turn, between all-reduces
// on the same slots: the root ends with the sum, then every rank with the root's tensor; a
// negative control (the root's own input is not every rank's) shows the copy happened.
TEST(SharedMemoryAllreduce, ReduceToARootAndBroadcastFromItOverManyChunks) {
  constexpr int kSize = 3;
  run_group(kSize, SharedMemoryOptions().slot_bytes(4096), [=](int rank, SharedMemoryAllreduce* group) {
    ASSERT_NE(group, nullptr);
    for (int root = 0; root < kSize; ++root) {
      for (int64_t numel : {int64_t{1}, int64_t{1025}, int64_t{5000}}) {
        at::Tensor before = input_of(rank, numel, at::kFloat), mine = input_of(rank, numel, at::kDouble);
        at::Tensor summed = input_of(rank, numel, at::kFloat);
        auto first = group->all_reduce(before, ReduceOp::Max);
        auto reduce = group->reduce(summed, ReduceOp::Sum, root);
        auto broadcast = group->broadcast(mine, root);
        first->wait();
        reduce->wait();
        broadcast->wait();
        if (rank == root) {
          EXPECT_TRUE(summed.equal(input_of(0, numel, at::kFloat) + input_of(1, numel, at::kFloat) +
                                   input_of(2, numel, at::kFloat)));
        }
        EXPECT_TRUE(mine.equal(input_of(root, numel, at::kDouble))) << "root " << root << ", " << numel;
        EXPECT_EQ(mine.equal(input_of(rank, numel, at::kDouble)), rank == root);
        EXPECT_TRUE(before.equal(input_of(kSize - 1, numel, at::kFloat)));
      }
    }
  });
}

// Ranks that name different roots fail on every rank, naming each one's, and nothing is copied.
TEST(SharedMemoryAllreduce, RanksThatDisagreeOnTheRootFailOnEveryRank) {
  std::vector<std::string> messages(2);
  run_group(2, SharedMemoryOptions(), [&](int rank, SharedMemoryAllreduce* group) {
    ASSERT_NE(group, nullptr);
    auto tensor = torch::full({10}, rank, torch::kFloat);
    try {
      group->broadcast(tensor, /*root=*/rank)->wait();
    } catch (const dpt::DistError& e) {
      messages[rank] = e.what();
    }
    EXPECT_TRUE(tensor.equal(torch::full({10}, rank, torch::kFloat)));
  });
  for (int rank = 0; rank < 2; ++rank) {
    EXPECT_NE(
        messages[rank].find("rank 0: broadcast from rank 0 of 10 Float\n    rank 1: broadcast from rank 1 of 10 Float"),
        std::string::npos)
        << messages[rank];
  }
}

TEST(SharedMemoryAllreduce, SlotsShrinkWithLargeWorldsToKeepTheSegmentSmall) {
  EXPECT_EQ(dpt::dist::transport::shm::default_slot_bytes(2), size_t{4} << 20);
  EXPECT_EQ(dpt::dist::transport::shm::default_slot_bytes(4), size_t{4} << 20);
  EXPECT_EQ(dpt::dist::transport::shm::default_slot_bytes(8), size_t{2} << 20);
  EXPECT_EQ(dpt::dist::transport::shm::default_slot_bytes(64), size_t{256} << 10);
  EXPECT_EQ(dpt::dist::transport::shm::default_slot_bytes(3) % 4096, 0u);
  for (int n : {2, 3, 5, 8, 64, 1000})
    EXPECT_LE(2 * n * dpt::dist::transport::shm::default_slot_bytes(n), size_t{32} << 20) << n;
}

TEST(SharedMemoryAllreduce, TakesOnlyWhatItCanReduce) {
  run_group(2, SharedMemoryOptions(), [](int, SharedMemoryAllreduce* group) {
    ASSERT_NE(group, nullptr);
    EXPECT_TRUE(group->accepts(torch::ones({4}), ReduceOp::Sum));
    EXPECT_TRUE(group->accepts(torch::ones({4}, torch::kDouble), ReduceOp::Max));
    EXPECT_FALSE(group->accepts(torch::ones({4}, torch::kHalf), ReduceOp::Sum));
    EXPECT_FALSE(group->accepts(torch::ones({4}, torch::kLong), ReduceOp::Sum));
    EXPECT_FALSE(group->accepts(torch::ones({4, 4}).t(), ReduceOp::Sum));
    EXPECT_TRUE(group->accepts(torch::ones({4}), ReduceOp::Mean));
  });
}

TEST(SharedMemoryAllreduce, RanksThatDisagreeOnTheTensorFailOnEveryRank) {
  std::vector<std::string> messages(2);
  run_group(2, SharedMemoryOptions(), [&](int rank, SharedMemoryAllreduce* group) {
    ASSERT_NE(group, nullptr);
    auto tensor = torch::ones({rank == 0 ? 10 : 12});
    try {
      group->all_reduce(tensor, ReduceOp::Sum)->wait();
    } catch (const dpt::DistError& e) {
      messages[rank] = e.what();
    }
    // The group stays failed: a later operation gets the same error at once.
    EXPECT_THROW(group->all_reduce(torch::ones({10}), ReduceOp::Sum)->wait(), dpt::DistError);
  });
  for (int rank = 0; rank < 2; ++rank) {
    EXPECT_NE(messages[rank].find(dpt::str("rank ", rank, ": all_reduce over shared memory: the ranks disagree on "
                                           "what they reduce: every rank must issue the same collectives")),
              std::string::npos)
        << messages[rank];
    EXPECT_NE(messages[rank].find("Each rank's:\n    rank 0: all_reduce(sum) of 10 Float\n    rank 1: "
                                  "all_reduce(sum) of 12 Float"),
              std::string::npos)
        << messages[rank];
  }
}

// A rank that skipped a collective sums its next one with the others' current one: the same size,
// but another step. Both ranks fail, naming both steps, and nothing is summed.
TEST(SharedMemoryAllreduce, RanksAtDifferentStepsFailOnEveryRank) {
  std::vector<std::string> messages(2);
  std::vector<at::Tensor> tensors{torch::ones({10}), torch::ones({10})};
  run_group(2, SharedMemoryOptions(), [&](int rank, SharedMemoryAllreduce* group) {
    ASSERT_NE(group, nullptr);
    try {
      group->all_reduce(tensors[rank], ReduceOp::Sum, /*step=*/rank == 0 ? 5 : 6)->wait();
    } catch (const dpt::DistError& e) {
      messages[rank] = e.what();
    }
  });
  for (int rank = 0; rank < 2; ++rank) {
    EXPECT_NE(messages[rank].find("rank 0: all_reduce(sum) of 10 Float step 5\n    rank 1: all_reduce(sum) of 10 "
                                  "Float step 6"),
              std::string::npos)
        << messages[rank];
  }
  EXPECT_TRUE(tensors[0].equal(torch::ones({10}))) << "summed anyway: " << tensors[0];
}

TEST(SharedMemoryAllreduce, EveryRankFallsBackWhenOneCannotMapTheSegment) {
  // Rank 1 expects another layout, as a rank on another host (or with another /dev/shm) fails to
  // open rank 0's segment: every rank returns null, with rank 1's reason.
  std::vector<std::string> why_not;
  run_group(
      2, SharedMemoryOptions(),
      [](int, SharedMemoryAllreduce* group) { EXPECT_EQ(group, nullptr); }, &why_not,
      [](int rank) { return SharedMemoryOptions().slot_bytes(rank == 0 ? 8192 : 4096); });
  for (const auto& reason : why_not) {
    EXPECT_NE(reason.find("rank 1: /dptrain-"), std::string::npos) << reason;
    EXPECT_NE(reason.find("is not the size expected for 2 ranks"), std::string::npos) << reason;
  }
}

// A rank in another process that exits without a word: the waiting rank names it within moments,
// not after its timeout.
TEST(SharedMemoryAllreduce, APeerProcessThatExitedIsNamed) {
  dpt::testing::TempDir dir;
  const std::string store_path = dir.path() + "/store";
  const auto options = SharedMemoryOptions().timeout(std::chrono::seconds(60));
  const pid_t child = fork();
  ASSERT_GE(child, 0);
  if (child == 0) {  // rank 1: joins, then leaves at once
    auto store = c10::make_intrusive<c10d::FileStore>(store_path, 2);
    auto group = SharedMemoryAllreduce::attach(*store, local_world(1, 2), options);
    _exit(group ? 0 : 1);
  }
  auto store = c10::make_intrusive<c10d::FileStore>(store_path, 2);
  auto group = SharedMemoryAllreduce::attach(*store, local_world(0, 2), options);
  int status = 0;
  ASSERT_EQ(waitpid(child, &status, 0), child);
  ASSERT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0);
  ASSERT_NE(group, nullptr);
  const auto start = std::chrono::steady_clock::now();
  try {
    group->all_reduce(torch::ones({8}), ReduceOp::Sum)->wait();
    ADD_FAILURE() << "the all_reduce completed without rank 1";
  } catch (const dpt::DistError& e) {
    EXPECT_NE(std::string(e.what()).find("rank 1 (pid " + std::to_string(child) + ") has exited"), std::string::npos)
        << e.what();
  }
  EXPECT_LT(std::chrono::steady_clock::now() - start, std::chrono::seconds(10)) << "not the 60 s timeout";
}
