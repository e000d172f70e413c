#include <gtest/gtest.h>

#include <limits>

#include <torch/nn/functional/loss.h>
#include <torch/torch.h>

#include "dptrain/common/error.h"
#include "dptrain/train/metrics.h"
#include "support/thread_ranks.h"

using dpt::train::MetricSums;
using dpt::train::topk_correct;

TEST(TopkCorrect, MatchesTorchTopkWithoutTies) {
  const auto logits = torch::tensor({0.1, 0.9, 0.3, 0.5, 0.7, 0.2,  //
                                     2.0, -1.0, 0.5, 3.0, 1.0, -2.0,  //
                                     -0.5, -0.4, -0.3, -0.2, -0.1, 0.0,  //
                                     4.0, 3.0, 2.0, 1.0, 0.0, -1.0})
                          .reshape({4, 6});
  const auto targets = torch::tensor({4, 4, 0, 0});
  // pytorch/examples' accuracy() on these rows in /usr/bin/python3 (torch 1.13): 1, 2, 3, 3.
  EXPECT_EQ(topk_correct(logits, targets, {1, 2, 3, 5}), (std::vector<int64_t>{1, 2, 3, 3}));
}

TEST(TopkCorrect, TiesGoToTheLowerClassIndex) {
  const auto a = torch::tensor({1.0, 3.0, 3.0, 0.0, 3.0, 2.0, 2.0});
  const auto b = torch::full({7}, 5.0, torch::kDouble);
  const auto c = torch::tensor({0.0, 1.0, 1.0, 1.0, 1.0, 1.0, 0.0});
  const auto logits = torch::stack({a, a, b, b, c, c, c});
  const auto targets = torch::tensor({4, 1, 6, 4, 0, 3, 6});
  // Ranks by hand: a/4 -> 2 (classes 1 and 2 tie and come first), a/1 -> 0, b/6 -> 6, b/4 -> 4,
  // c/0 -> 5 (five larger), c/3 -> 2, c/6 -> 6 (five larger, and class 0 ties before it).
  EXPECT_EQ(topk_correct(logits, targets, {1, 2, 3, 5, 7, 8}),
            (std::vector<int64_t>{1, 1, 3, 4, 7, 7}));
  // The same on float32 and with integer targets of another type.
  EXPECT_EQ(topk_correct(logits.to(torch::kFloat), targets.to(torch::kInt), {3}),
            (std::vector<int64_t>{3}));
}

TEST(TopkCorrect, NaNRanksAboveEveryNumber) {
  const double nan = std::numeric_limits<double>::quiet_NaN();
  const auto partly = torch::tensor({1.0, nan, 3.0, 2.0});
  const auto all = torch::full({4}, nan, torch::kDouble);
  const auto logits = torch::stack({partly, partly, partly, all, all});
  const auto targets = torch::tensor({2, 1, 0, 0, 3});
  // Ranks: 1 (the NaN first), 0, 3, then 0 and 3 (NaNs tie, the lower class first). torch.topk in
  // /usr/bin/python3 (torch 1.13) puts class 1 first in each partly-NaN row, then class 2; argmax
  // picks class 0 in each all-NaN row. Were NaN compared as a number (always false), 4, 4, 5.
  EXPECT_EQ(topk_correct(logits, targets, {1, 2, 4}), (std::vector<int64_t>{2, 3, 5}));
}

TEST(TopkCorrect, RejectsMismatchedShapes) {
  EXPECT_THROW(topk_correct(torch::zeros({4, 3}), torch::zeros({3}, torch::kLong), {1}),
               dpt::ConfigError);
  EXPECT_THROW(topk_correct(torch::zeros({4}), torch::zeros({4}, torch::kLong), {1}),
               dpt::ConfigError);
}

namespace {

// 13 samples of 10 classes, made once (the global generator is not for concurrent ranks).
struct Samples {
  Samples() {
    torch::manual_seed(7);
    logits = torch::randn({13, 10}, torch::kDouble);
    targets = torch::randint(10, {13}, torch::kLong);
  }

  // Rows `begin` to `end`, in batches of at most 4.
  MetricSums evaluate(int64_t begin, int64_t end) const {
    MetricSums sums;
    for (int64_t i = begin; i < end; i += 4) {
      const int64_t j = std::min(i + 4, end);
      const auto batch = logits.slice(0, i, j);
      const auto target = targets.slice(0, i, j);
      sums.add(batch, target, torch::nn::functional::cross_entropy(batch, target).item<double>());
    }
    return sums;
  }

  torch::Tensor logits, targets;
};

}  // namespace

TEST(MetricSums, TwoRanksOnAnUnevenSplitEqualOneProcessExactly) {
  const Samples samples;
  const MetricSums single = samples.evaluate(0, 13);
  ASSERT_EQ(single.count, 13);
  dpt::testing::run_ranks(2, [&](dpt::dist::Communicator& comm) {
    // Rank 0 has 8 samples, rank 1 has 5.
    const MetricSums local = comm.rank() == 0 ? samples.evaluate(0, 8) : samples.evaluate(8, 13);
    const MetricSums all = local.reduced(comm);
    EXPECT_EQ(all.count, 13);
    EXPECT_EQ(all.correct1, single.correct1);
    EXPECT_EQ(all.correct5, single.correct5);
    EXPECT_EQ(all.top1_percent(), single.top1_percent());
    EXPECT_EQ(all.top5_percent(), single.top5_percent());
    // The loss sums add the same batch sums in another order.
    EXPECT_NEAR(all.loss(), single.loss(), 1e-14);
  });
}

TEST(MetricSums, MeansAndEmptySums) {
  MetricSums sums;
  EXPECT_EQ(sums.top1_percent(), 0.0);
  EXPECT_EQ(sums.loss(), 0.0);
  const auto logits = torch::tensor({1.0, 0.0, 0.0, 1.0}).reshape({2, 2});
  sums.add(logits, torch::tensor({0, 0}), 0.5);
  EXPECT_EQ(sums.correct1, 1);
  EXPECT_EQ(sums.correct5, 2);
  EXPECT_EQ(sums.top1_percent(), 50.0);
  EXPECT_EQ(sums.top5_percent(), 100.0);
  EXPECT_EQ(sums.loss(), 0.5);
}

TEST(AverageMeter, RunningAverageAndDisplay) {
  dpt::train::AverageMeter acc1("Acc@1", 2);
  acc1.update(50.0, 4);
  acc1.update(75.0, 4);
  EXPECT_EQ(acc1.value(), 75.0);
  EXPECT_EQ(acc1.average(), 62.5);
  EXPECT_EQ(acc1.count(), 8);
  EXPECT_EQ(acc1.str(), "Acc@1  75.00 ( 62.50)");
  acc1.reset();
  EXPECT_EQ(acc1.count(), 0);
  EXPECT_EQ(acc1.str(), "Acc@1   0.00 (  0.00)");
}
