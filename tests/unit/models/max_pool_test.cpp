#include <gtest/gtest.h>

#include <ATen/Parallel.h>
#include <torch/torch.h>

#include <vector>

#include "dptrain/models/max_pool.h"
#include "models/bf16_avx512.h"
#include "models/max_pool_avx512.h"
#include "models/max_pool_kernel.h"
#include "support/bf16_compare.h"
#include "support/python_oracle.h"

namespace models = dpt::models;

using dpt::testing::bf16_channels_last;
using dpt::testing::bf16_error;
using dpt::testing::kBf16Tolerance;

namespace {

struct Pool {
  std::vector<int64_t> kernel, stride, padding;
};

struct Pooled {
  torch::Tensor y, grad_x;
};

// One forward and backward of `pool` through `run` (dpt's or LibTorch's max_pool2d).
template <typename Run>
Pooled step(const torch::Tensor& input, const torch::Tensor& grad, const Pool& pool, Run run) {
  auto x = input.detach().requires_grad_();
  auto y = run(x, pool.kernel, pool.stride, pool.padding);
  y.backward(grad.to(y.scalar_type()));
  return {y.detach(), x.grad()};
}

Pooled fused(const torch::Tensor& x, const torch::Tensor& grad, const Pool& pool) {
  return step(x, grad, pool, [](const torch::Tensor& in, auto k, auto s, auto p) {
    return models::max_pool(in, k, s, p);
  });
}

// The definition in float64, from the same bf16 values: LibTorch's pooling, whose rule for ties
// and NaN is the one the fused layer follows, with its gradients summed exactly.
Pooled definition(const torch::Tensor& x, const torch::Tensor& grad, const Pool& pool) {
  return step(x.to(torch::kDouble), grad.to(torch::kDouble), pool, [](const torch::Tensor& in, auto k, auto s, auto p) {
    return torch::max_pool2d(in, k, s, p);
  });
}

std::vector<int64_t> output_shape(const torch::Tensor& x, const Pool& pool) {
  return {x.size(0), x.size(1), (x.size(2) + 2 * pool.padding[0] - pool.kernel[0]) / pool.stride[0] + 1,
          (x.size(3) + 2 * pool.padding[1] - pool.kernel[1]) / pool.stride[1] + 1};
}

}  // namespace

TEST(MaxPool, IsTheDefinitionForEveryShape) {
  // ResNet's stem pool; channel counts that leave remainders in vector registers and ones past 64;
  // overlapping and disjoint windows, padded and not, rectangular.
  const std::vector<std::pair<std::vector<int64_t>, Pool>> cases = {
      {{32, 64, 16, 16}, {{3, 3}, {2, 2}, {1, 1}}}, {{4, 3, 7, 9}, {{3, 3}, {2, 2}, {1, 1}}},
      {{2, 70, 9, 9}, {{2, 2}, {2, 2}, {0, 0}}},    {{3, 130, 10, 11}, {{3, 3}, {1, 1}, {1, 1}}},
      {{2, 17, 8, 8}, {{2, 3}, {1, 2}, {1, 1}}}};
  int64_t seed = 0;
  for (const auto& [shape, pool] : cases) {
    SCOPED_TRACE(::testing::Message() << "shape " << shape[0] << "x" << shape[1] << "x" << shape[2] << "x" << shape[3]
                                      << " kernel " << pool.kernel[0] << "x" << pool.kernel[1]);
    torch::manual_seed(++seed);
    const auto x = bf16_channels_last(torch::randn(shape));
    const auto grad = bf16_channels_last(torch::randn(output_shape(x, pool)));
    const auto got = fused(x, grad, pool);
    const auto want = definition(x, grad, pool);
    ASSERT_EQ(got.y.scalar_type(), torch::kBFloat16);
    EXPECT_TRUE(got.y.is_contiguous(torch::MemoryFormat::ChannelsLast));
    EXPECT_TRUE(got.grad_x.is_contiguous(torch::MemoryFormat::ChannelsLast));
    EXPECT_TRUE(got.y.to(torch::kDouble).equal(want.y));  // a maximum is one of the inputs: exact
    EXPECT_LT(bf16_error(got.grad_x, want.grad_x), kBf16Tolerance);
  }
}

TEST(MaxPool, TheToleranceRejectsAGradientThatLosesOverlaps) {
  // A scatter that assigns instead of adding keeps one window's gradient where overlapping
  // windows share their maximum: it lands outside the tolerance the fused layer is held to.
  torch::manual_seed(11);
  const Pool pool{{3, 3}, {2, 2}, {1, 1}};
  const auto x = bf16_channels_last(torch::randn({4, 16, 12, 12}));
  const auto grad = bf16_channels_last(torch::randn(output_shape(x, pool)));
  const auto want = definition(x, grad, pool);
  const auto [pooled, indices] = torch::max_pool2d_with_indices(x.to(torch::kDouble), pool.kernel, pool.stride,
                                                                pool.padding);
  auto assigned = torch::zeros({4, 16, 12 * 12}, torch::kDouble);
  assigned.scatter_(2, indices.flatten(2), grad.to(torch::kDouble).flatten(2));
  EXPECT_GT(bf16_error(assigned.view({4, 16, 12, 12}), want.grad_x), kBf16Tolerance);
  EXPECT_LT(bf16_error(fused(x, grad, pool).grad_x, want.grad_x), kBf16Tolerance);
}

TEST(MaxPool, TiesAndNaNGoWhereLibTorchSendsThem) {
  // Values from a small set (ties in most windows), some NaN, and integer gradients, whose sums
  // are exact in bf16: the fused layer must agree with LibTorch to the bit.
  torch::manual_seed(12);
  const Pool pool{{3, 3}, {2, 2}, {1, 1}};
  auto values = torch::randint(0, 3, {4, 40, 13, 13}).to(torch::kFloat);
  values.masked_fill_(torch::rand(values.sizes()) < 0.02, std::numeric_limits<float>::quiet_NaN());
  const auto x = bf16_channels_last(values);
  const auto grad = bf16_channels_last(torch::randint(-4, 5, output_shape(x, pool)).to(torch::kFloat));
  const auto got = fused(x, grad, pool);
  const auto want = definition(x, grad, pool);
  EXPECT_TRUE(torch::allclose(got.y.to(torch::kDouble), want.y, 0, 0, /*equal_nan=*/true));
  EXPECT_GT(want.y.isnan().sum().item<int64_t>(), 0);
  EXPECT_TRUE(got.grad_x.to(torch::kDouble).equal(want.grad_x));
}

TEST(MaxPool, DoesNotDependOnTheNumberOfThreads) {
  torch::manual_seed(13);
  const Pool pool{{3, 3}, {2, 2}, {1, 1}};
  const auto x = bf16_channels_last(torch::randn({16, 32, 20, 20}));
  const auto grad = bf16_channels_last(torch::randn(output_shape(x, pool)));
  const int threads = at::get_num_threads();
  at::set_num_threads(1);
  const auto one = fused(x, grad, pool);
  at::set_num_threads(4);
  const auto four = fused(x, grad, pool);
  at::set_num_threads(threads);
  EXPECT_TRUE(one.y.equal(four.y));
  EXPECT_TRUE(one.grad_x.equal(four.grad_x));
}

TEST(MaxPool, PortableAndAvx512LoopsAgreeToTheBit) {
  // Held to CI, whose machines have AVX-512.
  if (!dpt::models::kernel::have_avx512()) {
    DPT_MISSING_DEPENDENCY("this CPU has no AVX-512, so its loops cannot be compared");
  }
  namespace kernel = dpt::models::kernel;
  torch::manual_seed(14);
  auto values = torch::randn({1, 70, 11, 10});
  values.masked_fill_(torch::rand(values.sizes()) < 0.01, std::numeric_limits<float>::quiet_NaN());
  auto x = bf16_channels_last(values);
  kernel::PoolShape s;
  s.batch = 1;
  s.channels = 70;
  s.height = 11;
  s.width = 10;
  s.kernel_h = s.kernel_w = 3;
  s.stride_h = s.stride_w = 2;
  s.pad_h = s.pad_w = 1;
  s.out_height = 6;
  s.out_width = 5;
  auto grad = bf16_channels_last(torch::randn({1, 70, 6, 5}));
  const auto* x_bits = reinterpret_cast<const uint16_t*>(x.data_ptr<at::BFloat16>());
  const auto* grad_bits = reinterpret_cast<const uint16_t*>(grad.data_ptr<at::BFloat16>());
  const size_t outputs = 70 * 6 * 5;
  std::vector<uint16_t> y_portable(outputs), y_avx512(outputs);
  std::vector<uint8_t> at_portable(outputs), at_avx512(outputs);
  kernel::max_pool_image_portable(x_bits, s, y_portable.data(), at_portable.data());
  kernel::max_pool_image_avx512(x_bits, s, y_avx512.data(), at_avx512.data());
  EXPECT_EQ(y_portable, y_avx512);
  EXPECT_EQ(at_portable, at_avx512);
  std::vector<uint16_t> grad_portable(70 * 11 * 10), grad_avx512(grad_portable.size());
  kernel::max_pool_grad_image_portable(grad_bits, at_portable.data(), s, grad_portable.data());
  kernel::max_pool_grad_image_avx512(grad_bits, at_portable.data(), s, grad_avx512.data());
  EXPECT_EQ(grad_portable, grad_avx512);
}

TEST(MaxPool, OtherCasesRunLibTorchs) {
  // float32 and NCHW bf16: LibTorch's max_pool2d, bit for bit.
  torch::manual_seed(15);
  const Pool pool{{3, 3}, {2, 2}, {1, 1}};
  const auto grad = torch::randn({4, 8, 5, 5});
  for (const auto& x : {torch::randn({4, 8, 9, 9}), torch::randn({4, 8, 9, 9}).to(torch::kBFloat16),
                        torch::randn({4, 8, 9, 9}).contiguous(torch::MemoryFormat::ChannelsLast)}) {
    const auto got = fused(x, grad, pool);
    const auto want = step(x, grad, pool, [](const torch::Tensor& in, auto k, auto s, auto p) {
      return torch::max_pool2d(in, k, s, p);
    });
    EXPECT_TRUE(got.y.equal(want.y));
    EXPECT_TRUE(got.grad_x.equal(want.grad_x));
  }
}
