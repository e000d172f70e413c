#include "dptrain/optim/fused_sgd.h"

#include <gtest/gtest.h>

#include <torch/cuda.h>
#include <torch/torch.h>

#include <vector>

#include "dptrain/compat/compat.h"

using dpt::optim::FusedSGD;

namespace {

// Parameters of every kind the step meets: a bias, a channels_last convolution weight, a 1x1
// convolution weight, a matrix large enough to be split over threads, one without a gradient, one
// whose gradient is laid out unlike it (transposed) and a double one (the last two take SGD's own
// steps).
constexpr size_t kOneByOne = 2, kWithoutGradient = 4, kTransposedGradient = 5;
std::vector<at::Tensor> make_parameters(const at::Device& device) {
  torch::manual_seed(3);
  std::vector<at::Tensor> params{torch::randn({37}),
                                 torch::randn({64, 3, 3, 3}).contiguous(at::MemoryFormat::ChannelsLast),
                                 torch::randn({32, 16, 1, 1}),
                                 torch::randn({1000, 257}),
                                 torch::randn({5}),
                                 torch::randn({9, 11}),
                                 torch::randn({13}, torch::kDouble)};
  for (auto& p : params) p = p.to(device).set_requires_grad(true);
  return params;
}

void set_gradients(std::vector<at::Tensor>& params, int step) {
  torch::manual_seed(100 + step);
  for (size_t i = 0; i < params.size(); ++i) {
    auto& p = params[i];
    if (i == kWithoutGradient) continue;
    at::Tensor grad = i == kTransposedGradient ? torch::randn({11, 9}).t()
                                               : torch::randn_like(p, p.options().device(at::kCPU));
    grad = grad.to(p.device());
    if (i == kOneByOne) {
      // As cuDNN gives it for a channels_last input: strided (16, 1, 16, 16) where the weight is
      // strided (16, 1, 1, 1), the same memory.
      grad = at::empty(grad.sizes(), grad.options().memory_format(at::MemoryFormat::ChannelsLast)).copy_(grad);
      EXPECT_NE(grad.strides(), p.strides());
    }
    p.mutable_grad() = grad;
  }
}

// Five steps of both optimizers from the same weights and gradients, the learning rate changing
// between steps as a schedule changes it; every weight and momentum buffer compared bitwise.
void expect_same_steps(const torch::optim::SGDOptions& options, const at::Device& device = at::kCPU) {
  auto fused_params = make_parameters(device);
  auto reference_params = make_parameters(device);
  FusedSGD fused(fused_params, options);
  torch::optim::SGD reference(reference_params, options);
  for (int step = 0; step < 5; ++step) {
    set_gradients(fused_params, step);
    set_gradients(reference_params, step);
    for (auto* group : {&fused.param_groups()[0], &reference.param_groups()[0]}) {
      group->options().set_lr(options.lr() * (1.0 - 0.13 * step));
    }
    fused.step();
    reference.step();
    for (size_t i = 0; i < fused_params.size(); ++i) {
      ASSERT_TRUE(torch::equal(fused_params[i], reference_params[i])) << "parameter " << i << " after step " << step;
      ASSERT_EQ(fused_params[i].strides(), reference_params[i].strides());
    }
  }
  using StateMap = std::decay_t<decltype(reference.state())>;
  ASSERT_EQ(fused.state().size(), reference.state().size());
  for (size_t i = 0; i < fused_params.size(); ++i) {
    auto mine = fused.state().find(dpt::compat::optimizer_state_key<StateMap>(fused_params[i]));
    auto theirs = reference.state().find(dpt::compat::optimizer_state_key<StateMap>(reference_params[i]));
    ASSERT_EQ(mine == fused.state().end(), theirs == reference.state().end()) << "parameter " << i;
    if (mine == fused.state().end()) continue;
    const auto& buffer = static_cast<torch::optim::SGDParamState&>(*mine->second).momentum_buffer();
    const auto& expected = static_cast<torch::optim::SGDParamState&>(*theirs->second).momentum_buffer();
    EXPECT_TRUE(torch::equal(buffer, expected)) << "momentum buffer " << i;
    EXPECT_EQ(buffer.strides(), expected.strides()) << "momentum buffer " << i;
  }
}

}  // namespace

TEST(FusedSgd, MomentumAndWeightDecayBitwiseAsSgd) {
  expect_same_steps(torch::optim::SGDOptions(0.1).momentum(0.9).weight_decay(1e-4));
}

TEST(FusedSgd, NesterovBitwiseAsSgd) {
  expect_same_steps(torch::optim::SGDOptions(0.05).momentum(0.9).weight_decay(5e-5).nesterov(true));
}

// On a GPU each of SGD's steps is one multi-tensor kernel over the parameters: the same
// arithmetic per element as SGD's kernel per parameter.
TEST(FusedSgd, OnTheGpuBitwiseAsSgd_CUDA) {
  if (!torch::cuda::is_available()) GTEST_SKIP() << "no CUDA device";
  const at::Device gpu(at::kCUDA, 0);
  expect_same_steps(torch::optim::SGDOptions(0.1).momentum(0.9).weight_decay(1e-4), gpu);
  expect_same_steps(torch::optim::SGDOptions(0.05).momentum(0.9).weight_decay(5e-5).nesterov(true), gpu);
  expect_same_steps(torch::optim::SGDOptions(0.1), gpu);
}

// The step of mixed precision on a GPU: PyTorch's fused kernel, skipping on the device when the
// flag holds 1. It covers only what it can take whole, and refuses (changing nothing) otherwise.
TEST(FusedSgd, StepUnlessFoundInfSkipsOnTheDevice_CUDA) {
  if (!torch::cuda::is_available()) GTEST_SKIP() << "no CUDA device";
  const at::Device gpu(at::kCUDA, 0);
  const auto options = torch::optim::SGDOptions(0.1).momentum(0.9).weight_decay(1e-4).nesterov(true);
  const at::Tensor no_inf = torch::zeros({1}, gpu), inf = torch::ones({1}, gpu);
  const auto copies = [](const std::vector<at::Tensor>& tensors) {
    std::vector<at::Tensor> copied;
    for (const auto& t : tensors) copied.push_back(t.detach().clone());
    return copied;
  };
  const auto expect_unchanged = [](const std::vector<at::Tensor>& now, const std::vector<at::Tensor>& before) {
    for (size_t i = 0; i < now.size(); ++i) EXPECT_TRUE(torch::equal(now[i], before[i])) << "parameter " << i;
  };
  {  // a transposed gradient and a double parameter: not the kernel's
    auto params = make_parameters(gpu);
    FusedSGD fused(params, torch::optim::SGDOptions(0.1));
    set_gradients(params, 0);
    const auto before = copies(params);
    EXPECT_FALSE(fused.step_unless_found_inf(no_inf));
    expect_unchanged(params, before);
  }
  auto params = make_parameters(gpu), reference_params = make_parameters(gpu);
  // float32, gradients in their parameters' memory order (channels_last and 1x1 too)
  params.resize(kWithoutGradient);
  reference_params.resize(kWithoutGradient);
  FusedSGD fused(params, options);
  torch::optim::SGD reference(reference_params, options);
  set_gradients(params, 0);
  set_gradients(reference_params, 0);
  const auto before_first = copies(params);
  EXPECT_FALSE(fused.step_unless_found_inf(no_inf)) << "no momentum buffers yet: step() makes them";
  expect_unchanged(params, before_first);
  fused.step();
  reference.step();
  if (!dpt::compat::has_fused_sgd()) {
    EXPECT_FALSE(fused.step_unless_found_inf(no_inf));
    return;
  }
  for (int step = 1; step < 4; ++step) {
    set_gradients(params, step);
    set_gradients(reference_params, step);
    const auto before = copies(params);
    ASSERT_TRUE(fused.step_unless_found_inf(inf));
    expect_unchanged(params, before);
    ASSERT_TRUE(fused.step_unless_found_inf(no_inf));
    reference.step();
    for (size_t i = 0; i < params.size(); ++i) {
      // Not bitwise (the kernel rounds its own way), but SGD's step: a float's rounding apart,
      // where a step's move is some 1e-1.
      EXPECT_FALSE(torch::equal(params[i], before[i])) << "parameter " << i << " did not move";
      EXPECT_TRUE(torch::allclose(params[i], reference_params[i], 1e-5, 1e-6)) << "parameter " << i;
      EXPECT_EQ(params[i].strides(), reference_params[i].strides());
    }
  }
}

TEST(FusedSgd, DampeningBitwiseAsSgd) {
  expect_same_steps(torch::optim::SGDOptions(0.1).momentum(0.8).dampening(0.3).weight_decay(1e-3));
}

TEST(FusedSgd, PlainStepsBitwiseAsSgd) {
  expect_same_steps(torch::optim::SGDOptions(0.2));  // no momentum: no buffers
  expect_same_steps(torch::optim::SGDOptions(0.2).momentum(0.9));  // no weight decay
}

// Bitwise equality can tell roundings apart: the update rounded twice (the product, then the
// sum), as a kernel without fused multiply-adds would round it, differs from SGD's.
TEST(FusedSgd, TheComparisonSeesOneRoundingMore) {
  torch::manual_seed(7);
  const at::Tensor param = torch::randn({1000, 257}), grad = torch::randn({1000, 257});
  const at::Tensor fused = param.add(grad, -0.1);  // what SGD without momentum computes
  const at::Tensor rounded_twice = param - grad * static_cast<float>(0.1);
  EXPECT_FALSE(torch::equal(fused, rounded_twice));
  EXPECT_LT((fused - rounded_twice).abs().max().item<float>(), 1e-6);
}

TEST(FusedSgd, IsAnSgdForStateDictsAndCheckpoints) {
  auto params = make_parameters(at::kCPU);
  std::shared_ptr<torch::optim::Optimizer> optimizer =
      std::make_shared<FusedSGD>(params, torch::optim::SGDOptions(0.1).momentum(0.9));
  EXPECT_NE(dynamic_cast<torch::optim::SGD*>(optimizer.get()), nullptr);
}
