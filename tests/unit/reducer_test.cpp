#include <gtest/gtest.h>

#include <torch/torch.h>

#include "dptrain/parallel/reducer.h"

namespace {

using Buckets = std::vector<std::vector<size_t>>;

TEST(AssignBuckets, ReverseOrderFirstBucketSmallOneBucketPerDtype) {
  std::vector<at::Tensor> params{
      at::zeros({100}),              // 400 bytes
      at::zeros({200}),              // 800
      at::zeros({300}),              // 1200
      at::zeros({400}),              // 1600: closes the first float bucket (limit 1000)
      at::zeros({50}, at::kDouble),  // 400, its own dtype, never full
  };
  EXPECT_EQ(dpt::assign_buckets(params, /*first_cap_bytes=*/1000, /*cap_bytes=*/2000),
            (Buckets{{4}, {3}, {2, 1}, {0}}));
}

TEST(AssignBuckets, EverythingInOneBucketWhenItFits) {
  std::vector<at::Tensor> params{at::zeros({3}), at::zeros({4}), at::zeros({5})};
  EXPECT_EQ(dpt::assign_buckets(params, 1 << 20, 1 << 20), (Buckets{{2, 1, 0}}));
}

TEST(AssignBuckets, OneParameterPerBucketWhenLimitsAreTiny) {
  std::vector<at::Tensor> params{at::zeros({3}), at::zeros({4}), at::zeros({5})};
  EXPECT_EQ(dpt::assign_buckets(params, 1, 1), (Buckets{{2}, {1}, {0}}));
}

}  // namespace
