// The operation counter behind `bench-models --op-counts`: every ATen operation by name, on every
// thread, while it lives and only then.

#include <gtest/gtest.h>

#include <thread>

#include <torch/torch.h>

#include "dptrain/models/operation_counts.h"

namespace models = dpt::models;

TEST(OperationCounter, CountsEachOperationByName) {
  const auto x = torch::randn({4, 4});
  models::OperationCounter counter;
  torch::relu(x);
  torch::relu(x);
  torch::neg(x);
  const auto counts = counter.counts();
  EXPECT_EQ(counts.at("aten::relu"), 2);
  EXPECT_EQ(counts.at("aten::neg"), 1);
  EXPECT_EQ(counts.count("aten::sigmoid"), 0u);
}

TEST(OperationCounter, CountsTheBackwardAndOtherThreads) {
  const auto x = torch::randn({4, 4}, torch::requires_grad());
  models::OperationCounter counter;
  // mul forward, and twice backward: sum's gradient times 3 (MulBackward0), on autograd's side.
  (x * 3).sum().backward();
  std::thread([] { torch::sigmoid(torch::ones({2})); }).join();
  const auto counts = counter.counts();
  EXPECT_GE(counts.at("aten::mul"), 2);
  EXPECT_EQ(counts.at("aten::sigmoid"), 1);
}

TEST(OperationCounter, CountsOnlyWhileItLivesAndOnlyATen) {
  const auto x = torch::randn({4});
  {
    models::OperationCounter before;
    torch::relu(x);
    EXPECT_EQ(before.counts().at("aten::relu"), 1);
  }
  torch::relu(x);  // between the counters: counted by neither
  models::OperationCounter counter;
  torch::relu(x);
  {
    RECORD_FUNCTION("dptrain::not_aten", std::vector<c10::IValue>());
  }
  const auto counts = counter.counts();
  EXPECT_EQ(counts.at("aten::relu"), 1);
  EXPECT_EQ(counts.count("dptrain::not_aten"), 0u);
}
