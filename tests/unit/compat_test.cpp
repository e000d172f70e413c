#include <gtest/gtest.h>

#include <torch/torch.h>

#include "dptrain/compat/compat.h"

TEST(Compat, OptimizerStateKeyFindsTheOptimizersEntry) {
  auto weight = torch::ones({3}, torch::requires_grad());
  torch::optim::SGD sgd({weight}, torch::optim::SGDOptions(0.1).momentum(0.9));
  weight.sum().backward();
  sgd.step();
  auto& state = sgd.state();
  using Map = std::decay_t<decltype(state)>;
  auto it = state.find(dpt::compat::optimizer_state_key<Map>(weight));
  ASSERT_NE(it, state.end());
  auto& momentum = static_cast<torch::optim::SGDParamState&>(*it->second).momentum_buffer();
  EXPECT_TRUE(momentum.equal(torch::ones({3})));
}

TEST(Compat, AutocastGuardCastsAndRestores) {
  auto a = torch::randn({4, 4});
  {
    dpt::compat::AutocastGuard guard(at::kCPU, at::kBFloat16);
    EXPECT_EQ(torch::mm(a, a).scalar_type(), at::kBFloat16);
    {
      dpt::compat::AutocastGuard off(at::kCPU, at::kBFloat16, /*enabled=*/false);
      EXPECT_EQ(torch::mm(a, a).scalar_type(), at::kFloat);
    }
    EXPECT_EQ(torch::mm(a, a).scalar_type(), at::kBFloat16);
  }
  EXPECT_EQ(torch::mm(a, a).scalar_type(), at::kFloat);
}
