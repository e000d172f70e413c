#pragma once
// Comparing a bf16 layer's results with their definition computed in float64:
//
//   auto x = dpt::testing::bf16_channels_last(torch::randn({2, 8, 5, 5}));
//   EXPECT_LT(dpt::testing::bf16_error(got, want_in_double), dpt::testing::kBf16Tolerance);

#include <torch/torch.h>

namespace dpt::testing {

inline torch::Tensor bf16_channels_last(const torch::Tensor& t) {
  return t.to(torch::kBFloat16).contiguous(torch::MemoryFormat::ChannelsLast);
}

// The largest error over the tensor, relative to each value with a floor of a thousandth of the
// largest, so that values near zero do not dominate.
inline double bf16_error(const torch::Tensor& got, const torch::Tensor& want) {
  return ((got.to(torch::kDouble) - want).abs() / (want.abs() + want.abs().max() * 1e-3)).max().item<double>();
}

// Within one rounding to bf16 (2^-9 relative) of the exact value, with room for float sums.
constexpr double kBf16Tolerance = 1.0 / 256;

}  // namespace dpt::testing
