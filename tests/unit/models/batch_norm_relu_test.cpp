#include <gtest/gtest.h>

#include <ATen/Parallel.h>
#include <torch/torch.h>

#include <algorithm>
#include <string>
#include <vector>

#include "dptrain/models/batch_norm_relu.h"
#include "models/batch_norm_relu_avx512.h"
#include "models/batch_norm_relu_kernel.h"
#include "support/bf16_compare.h"
#include "support/python_oracle.h"

namespace models = dpt::models;

using dpt::testing::bf16_channels_last;
using dpt::testing::bf16_error;
using dpt::testing::kBf16Tolerance;

namespace {

// A BatchNorm2d with weights, biases and running statistics away from their defaults.
torch::nn::AnyModule batch_norm(int64_t channels, int64_t seed) {
  torch::manual_seed(seed);
  torch::nn::BatchNorm2d bn(channels);
  torch::NoGradGuard no_grad;
  bn->weight.uniform_(0.5, 1.5);
  bn->bias.uniform_(-0.5, 0.5);
  bn->running_mean.uniform_(-1, 1);
  bn->running_var.uniform_(0.5, 2);
  return torch::nn::AnyModule(bn);
}

struct Result {
  torch::Tensor y, grad_x, grad_residual, grad_weight, grad_bias, running_mean, running_var, batches;
};

// One forward and backward through `run`, on double copies when `precise` (the definition,
// computed by LibTorch in float64) or as given.
template <typename Run>
Result step(torch::nn::AnyModule norm, torch::Tensor x, torch::Tensor residual, const torch::Tensor& grad, Run run) {
  auto* bn = norm.ptr()->as<torch::nn::BatchNorm2d>();
  x = x.detach().requires_grad_();
  if (residual.defined()) residual = residual.detach().requires_grad_();
  auto y = run(norm, x, residual);
  y.backward(grad.to(y.scalar_type()));
  return {y.detach(),
          x.grad(),
          residual.defined() ? residual.grad() : torch::Tensor(),
          bn->weight.grad(),
          bn->bias.grad(),
          bn->running_mean.clone(),
          bn->running_var.clone(),
          bn->num_batches_tracked.clone()};
}

Result fused(const torch::nn::AnyModule& norm, const torch::Tensor& x, const torch::Tensor& residual,
             const torch::Tensor& grad) {
  return step(norm.clone(), x, residual, grad, [](torch::nn::AnyModule& n, torch::Tensor in, torch::Tensor r) {
    return r.defined() ? models::norm_add_relu(n, in, r) : models::norm_relu(n, in);
  });
}

// The definition in float64, from the same bf16 values.
Result definition(const torch::nn::AnyModule& norm, const torch::Tensor& x, const torch::Tensor& residual,
                  const torch::Tensor& grad) {
  auto copy = norm.clone();
  copy.ptr()->to(torch::kDouble);
  return step(copy, x.to(torch::kDouble), residual.defined() ? residual.to(torch::kDouble) : residual, grad,
              [](torch::nn::AnyModule& n, torch::Tensor in, torch::Tensor r) {
                auto out = n.forward(in);
                return torch::relu(r.defined() ? out + r : out);
              });
}

void expect_definition(const Result& got, const Result& want) {
  EXPECT_LT(bf16_error(got.y, want.y), kBf16Tolerance);
  EXPECT_LT(bf16_error(got.grad_x, want.grad_x), kBf16Tolerance);
  if (want.grad_residual.defined()) {
    EXPECT_LT(bf16_error(got.grad_residual, want.grad_residual), kBf16Tolerance);
  }
  // Sums of float products, a chunk of rows at a time: about 2^-24 per term added.
  EXPECT_LT(bf16_error(got.grad_weight, want.grad_weight), 1e-4);
  EXPECT_LT(bf16_error(got.grad_bias, want.grad_bias), 1e-4);
  EXPECT_LT(bf16_error(got.running_mean, want.running_mean), 1e-6);
  EXPECT_LT(bf16_error(got.running_var, want.running_var), 1e-6);
  EXPECT_TRUE(got.batches.to(torch::kDouble).equal(want.batches.to(torch::kDouble)));
}

// Standard normal bf16 channels_last input, residual and output gradient of `shape`, and a batch
// norm over its channels, all from `seed`.
struct Inputs {
  torch::Tensor x, residual, grad;
  torch::nn::AnyModule norm;
};

Inputs random_inputs(const std::vector<int64_t>& shape, int64_t seed) {
  torch::manual_seed(seed);
  Inputs in;
  in.x = bf16_channels_last(torch::randn(shape));
  in.residual = bf16_channels_last(torch::randn(shape));
  in.grad = bf16_channels_last(torch::randn(shape));
  in.norm = batch_norm(shape[1], seed);
  return in;
}

}  // namespace

TEST(BatchNormReLU, IsTheDefinitionForEveryShapeWithAndWithoutResidual) {
  // Channel counts that fill vector registers and ones that leave remainders; rows spanning one
  // chunk and many; data with a mean far from zero (where sum-of-squares variance cancels).
  const std::vector<std::vector<int64_t>> shapes = {{8, 64, 16, 16}, {4, 3, 5, 7}, {2, 70, 9, 9}, {32, 24, 32, 32}};
  int64_t seed = 0;
  for (const auto& shape : shapes) {
    for (const bool with_residual : {false, true}) {
      SCOPED_TRACE(::testing::Message() << "shape " << shape[0] << "x" << shape[1] << "x" << shape[2] << "x"
                                        << shape[3] << (with_residual ? " with residual" : ""));
      torch::manual_seed(++seed);
      const auto x = bf16_channels_last(torch::randn(shape) * 3 + 20);
      const auto residual = with_residual ? bf16_channels_last(torch::randn(shape)) : torch::Tensor();
      const auto grad = bf16_channels_last(torch::randn(shape));
      const auto norm = batch_norm(shape[1], seed);
      const auto got = fused(norm, x, residual, grad);
      const auto want = definition(norm, x, residual, grad);
      ASSERT_EQ(got.y.scalar_type(), torch::kBFloat16);
      EXPECT_TRUE(got.y.is_contiguous(torch::MemoryFormat::ChannelsLast));
      expect_definition(got, want);
      // Many outputs are clipped and many are not, so a missing ReLU or mask could not pass.
      const double clipped = want.y.eq(0).to(torch::kDouble).mean().item<double>();
      EXPECT_GT(clipped, 0.2);
      EXPECT_LT(clipped, 0.8);
    }
  }
}

TEST(BatchNormReLU, TheToleranceRejectsNearMisses) {
  // What a slip would give (variance with n - 1, ReLU's gradient unmasked, the residual added
  // after the ReLU) lands outside the tolerance the test above holds the fused layer to.
  const auto [x, residual, grad, norm] = random_inputs({4, 16, 6, 6}, 7);
  const auto want = definition(norm, x, residual, grad);

  auto xd = x.to(torch::kDouble);
  const auto mean = xd.mean({0, 2, 3}, true);
  auto* bn = norm.ptr()->as<torch::nn::BatchNorm2d>();
  const auto w = bn->weight.to(torch::kDouble).view({1, -1, 1, 1});
  const auto b = bn->bias.to(torch::kDouble).view({1, -1, 1, 1});
  const auto unbiased = (xd - mean) / (xd.var({0, 2, 3}, /*unbiased=*/true, true) + 1e-5).sqrt() * w + b;
  EXPECT_GT(bf16_error(torch::relu(unbiased + residual.to(torch::kDouble)), want.y), kBf16Tolerance);
  const auto biased = (xd - mean) / (xd.var({0, 2, 3}, /*unbiased=*/false, true) + 1e-5).sqrt() * w + b;
  EXPECT_LT(bf16_error(torch::relu(biased + residual.to(torch::kDouble)), want.y), 1e-9);  // the formula itself
  EXPECT_GT(bf16_error(torch::relu(biased) + residual.to(torch::kDouble), want.y), kBf16Tolerance);
  EXPECT_GT(bf16_error(grad.to(torch::kDouble), want.grad_residual), kBf16Tolerance);
}

TEST(BatchNormReLU, DoesNotDependOnTheNumberOfThreads) {
  const auto [x, residual, grad, norm] = random_inputs({16, 32, 24, 24}, 3);
  const int threads = at::get_num_threads();
  at::set_num_threads(1);
  const auto one = fused(norm, x, residual, grad);
  at::set_num_threads(4);
  const auto four = fused(norm, x, residual, grad);
  at::set_num_threads(threads);
  for (const auto& [a, b] : {std::pair{one.y, four.y}, {one.grad_x, four.grad_x}, {one.grad_weight, four.grad_weight},
                             {one.grad_bias, four.grad_bias}, {one.running_var, four.running_var}}) {
    EXPECT_TRUE(a.equal(b));
  }
}

TEST(BatchNormReLU, OtherCasesRunTheLayersAsTheyAre) {
  // float32, NCHW bf16 and eval mode: the result is LibTorch's relu(bn(x) [+ residual]), bit for
  // bit, gradients and running statistics included.
  torch::manual_seed(5);
  const auto norm = batch_norm(8, 5);
  const auto grad = torch::randn({4, 8, 5, 5});
  const auto layers = [](torch::nn::AnyModule& n, torch::Tensor in, torch::Tensor r) {
    return torch::relu(r.defined() ? n.forward(in) + r : n.forward(in));
  };
  const auto via_joints = [](torch::nn::AnyModule& n, torch::Tensor in, torch::Tensor r) {
    return r.defined() ? models::norm_add_relu(n, in, r) : models::norm_relu(n, in);
  };
  for (const auto& x : {torch::randn({4, 8, 5, 5}), torch::randn({4, 8, 5, 5}).to(torch::kBFloat16)}) {
    for (const auto& residual : {torch::Tensor(), torch::randn({4, 8, 5, 5}).to(x.scalar_type())}) {
      const auto got = step(norm.clone(), x, residual, grad, via_joints);
      const auto want = step(norm.clone(), x, residual, grad, layers);
      EXPECT_TRUE(got.y.equal(want.y));
      EXPECT_TRUE(got.grad_x.equal(want.grad_x));
      if (residual.defined()) {
        EXPECT_TRUE(got.grad_residual.equal(want.grad_residual));
      }
      EXPECT_TRUE(got.grad_weight.equal(want.grad_weight));
      EXPECT_TRUE(got.running_var.equal(want.running_var));
    }
  }
  auto evaluating = norm.clone();
  evaluating.ptr()->eval();
  const auto x = bf16_channels_last(torch::randn({4, 8, 5, 5}));
  EXPECT_TRUE(models::norm_relu(evaluating, x).equal(torch::relu(evaluating.forward(x))));
}

namespace {

// A norm layer that keeps its last output, to see what the joints did with it; `as` casts it.
struct KeepsOutputImpl : torch::nn::Module {
  explicit KeepsOutputImpl(torch::Dtype as_) : as(as_) {}
  torch::Tensor forward(const torch::Tensor& x) {
    output = (x * 2).to(as);
    return output;
  }
  torch::Dtype as;
  torch::Tensor output;
};
TORCH_MODULE(KeepsOutput);

}  // namespace

TEST(BatchNormReLU, OtherCasesWorkInPlaceOnTheNormsOutput) {
  // As torchvision's blocks: the residual is added to, and ReLU applied on, the norm's own output.
  torch::manual_seed(6);
  const auto x = torch::randn({2, 4, 3, 3});
  const auto residual = torch::randn({2, 4, 3, 3});
  KeepsOutput keeps(torch::kFloat);
  torch::nn::AnyModule norm(keeps);
  auto y = models::norm_add_relu(norm, x, residual);
  EXPECT_EQ(y.data_ptr(), keeps->output.data_ptr());
  EXPECT_TRUE(y.equal(torch::relu(x * 2 + residual)));
  y = models::norm_relu(norm, x);
  EXPECT_EQ(y.data_ptr(), keeps->output.data_ptr());
  EXPECT_TRUE(y.equal(torch::relu(x * 2)));
}

TEST(BatchNormReLU, ANarrowerNormOutputTakesTheWiderSum) {
  // bf16 from the norm beside a float32 residual: in place, the sum would be rounded to bf16 (or
  // refused); the joint gives the float32 sum, as `+` does.
  torch::manual_seed(7);
  const auto x = torch::randn({2, 4, 3, 3});
  const auto residual = torch::randn({2, 4, 3, 3}) * 1e-3;
  KeepsOutput keeps(torch::kBFloat16);
  torch::nn::AnyModule norm(keeps);
  const auto y = models::norm_add_relu(norm, x, residual);
  ASSERT_EQ(y.scalar_type(), torch::kFloat);
  const auto want = torch::relu((x * 2).to(torch::kBFloat16).to(torch::kFloat) + residual);
  EXPECT_TRUE(y.equal(want));
  // The residual's small values are lost in a bf16 sum, so a rounded result would fail above.
  EXPECT_FALSE(want.equal(torch::relu((x * 2).to(torch::kBFloat16) + residual.to(torch::kBFloat16)).to(torch::kFloat)));
}

namespace {

// `rows` x `channels` bf16 values from N(mean, 1), as their bits.
std::vector<uint16_t> bf16_bits(int64_t rows, int64_t channels, double mean) {
  const at::Tensor values = (torch::randn({rows, channels}) + mean).to(torch::kBFloat16).contiguous();
  const auto* bits = reinterpret_cast<const uint16_t*>(values.data_ptr<at::BFloat16>());
  return std::vector<uint16_t>(bits, bits + values.numel());
}

std::vector<float> floats(int64_t n, double mean) {
  const at::Tensor values = (torch::randn({n}) + mean).contiguous();
  return std::vector<float>(values.data_ptr<float>(), values.data_ptr<float>() + n);
}

}  // namespace

// The AVX-512 loops take the same sums in the same order per channel as the portable ones, so the
// fused layer's results must not depend on which the CPU runs: every loop, on a chunk whose
// channels are not a multiple of 16 (the vector width's tail) and one whose are, with and without
// the residual, agrees to the bit. Held to CI, whose machines have AVX-512.
TEST(BatchNormReLU, PortableAndAvx512LoopsAgreeToTheBit) {
  namespace kernel = dpt::models::kernel;
  if (!kernel::have_avx512()) DPT_MISSING_DEPENDENCY("this CPU has no AVX-512, so its loops cannot be compared");
  torch::manual_seed(21);
  for (const int64_t channels : {37, 64}) {
    SCOPED_TRACE(std::to_string(channels) + " channels");
    const int64_t rows = 53, n = rows * channels;
    const auto x = bf16_bits(rows, channels, 3.0);  // off zero, where a careless sum would show
    const auto residual = bf16_bits(rows, channels, 0.0);
    const auto grad = bf16_bits(rows, channels, 0.0);

    std::vector<float> mean_p(channels), m2_p(channels), mean_v(channels), m2_v(channels);
    kernel::chunk_moments_portable(x.data(), rows, channels, mean_p.data(), m2_p.data());
    kernel::chunk_moments_avx512(x.data(), rows, channels, mean_v.data(), m2_v.data());
    EXPECT_EQ(mean_p, mean_v);
    EXPECT_EQ(m2_p, m2_v);

    const auto scale = floats(channels, 1.0), shift = floats(channels, 0.0);
    std::vector<uint16_t> y_p(n), y_v(n);
    for (const uint16_t* added : {static_cast<const uint16_t*>(nullptr), residual.data()}) {
      kernel::scale_shift_relu_rows_portable(x.data(), added, scale.data(), shift.data(), rows, channels, y_p.data());
      kernel::scale_shift_relu_rows_avx512(x.data(), added, scale.data(), shift.data(), rows, channels, y_v.data());
      EXPECT_EQ(y_p, y_v) << (added ? "with" : "without") << " the residual";
    }
    EXPECT_NE(std::count(y_p.begin(), y_p.end(), uint16_t{0}), 0) << "ReLU cut nothing: the test shows little";

    std::vector<float> sum_p(channels), centred_p(channels), sum_v(channels), centred_v(channels);
    kernel::chunk_grad_sums_portable(grad.data(), y_p.data(), x.data(), mean_p.data(), rows, channels, sum_p.data(),
                                     centred_p.data());
    kernel::chunk_grad_sums_avx512(grad.data(), y_p.data(), x.data(), mean_p.data(), rows, channels, sum_v.data(),
                                   centred_v.data());
    EXPECT_EQ(sum_p, sum_v);
    EXPECT_EQ(centred_p, centred_v);

    const auto a = floats(channels, 1.0), b = floats(channels, 0.0), c = floats(channels, 0.0);
    const kernel::InputGradient terms{mean_p.data(), a.data(), b.data(), c.data()};
    std::vector<uint16_t> gx_p(n), gx_v(n), gr_p(n), gr_v(n);
    kernel::input_grad_rows_portable(grad.data(), y_p.data(), x.data(), terms, rows, channels, gx_p.data(),
                                     gr_p.data());
    kernel::input_grad_rows_avx512(grad.data(), y_p.data(), x.data(), terms, rows, channels, gx_v.data(),
                                   gr_v.data());
    EXPECT_EQ(gx_p, gx_v);
    EXPECT_EQ(gr_p, gr_v);
  }
}
