#include <gtest/gtest.h>

#include <torch/torch.h>

#include <cmath>
#include <limits>

#include "dptrain/common/error.h"
#include "dptrain/parallel/reducer.h"
#include "support/thread_ranks.h"

namespace {

using Buckets = std::vector<std::vector<size_t>>;

TEST(AssignBuckets, FirstBucketFromTheTopLastBucketsFromTheBottomOnePerDtype) {
  std::vector<at::Tensor> params{
      at::zeros({100}),              // 400 bytes: the last float bucket (limit 500) ...
      at::zeros({200}),              // 800: ... reaches its limit with this one
      at::zeros({300}),              // 1200: the bucket before it (limit 1000)
      at::zeros({400}),              // 1600: the first float bucket (limit 1000)
      at::zeros({50}, at::kDouble),  // 400, its own dtype, never full
  };
  EXPECT_EQ(dpt::assign_buckets(params, {/*first=*/1000, /*rest=*/2000, /*last=*/500}),
            (Buckets{{4}, {3}, {2}, {1, 0}}));
}

// Parameters growing towards the output, as in a ResNet: the buckets at the end double from the
// last one's limit up to the middle buckets' limit, which the rest fill from the top.
TEST(AssignBuckets, BucketsDoubleFromTheLastUpToTheMiddleLimit) {
  std::vector<at::Tensor> params;
  for (int64_t numel : {25, 25, 50, 50, 100, 100, 200, 200, 400, 400}) params.push_back(at::zeros({numel}));
  // Limits (bytes): first 100; last 100, then 200, 400, 800 (1600 would pass the middle's 1000).
  EXPECT_EQ(dpt::assign_buckets(params, {100, 1000, 100}),
            (Buckets{{9}, {8}, {7}, {6, 5}, {4, 3}, {2, 1}, {0}}));
  // A last limit as large as the middle one gives PyTorch's layout: reverse order all along.
  EXPECT_EQ(dpt::assign_buckets(params, {100, 1000, 1000}), (Buckets{{9}, {8}, {7, 6}, {5, 4, 3}, {2, 1, 0}}));
}

// What the buckets at the end leave between them and the first bucket, when it is less than the
// first bucket's limit, joins the first bucket instead of making a bucket of its own.
TEST(AssignBuckets, ASmallRemainderJoinsTheFirstBucket) {
  std::vector<at::Tensor> params;
  for (int64_t numel : {25, 25, 50, 50, 100, 100, 300, 10, 400}) params.push_back(at::zeros({numel}));
  // The last buckets (limits 100, 200, 400, 800) end past their limit with parameter 6's 1200
  // bytes; the next limit, 1600, is the middle's 1000 or more. Parameter 7's 40 bytes are left.
  EXPECT_EQ(dpt::assign_buckets(params, {100, 1000, 100}), (Buckets{{8, 7}, {6, 5}, {4, 3}, {2, 1}, {0}}));
}

TEST(AssignBuckets, EverythingInOneBucketWhenItFits) {
  std::vector<at::Tensor> params{at::zeros({3}), at::zeros({4}), at::zeros({5})};
  EXPECT_EQ(dpt::assign_buckets(params, {1 << 20, 1 << 20, 1 << 20}), (Buckets{{2, 1, 0}}));
}

TEST(AssignBuckets, OneParameterPerBucketWhenLimitsAreTiny) {
  std::vector<at::Tensor> params{at::zeros({3}), at::zeros({4}), at::zeros({5})};
  EXPECT_EQ(dpt::assign_buckets(params, {1, 1, 1}), (Buckets{{2}, {1}, {0}}));
}

// The reducer on its own, as a front end other than DDP drives it: explicit arming, a custom
// hook (sum instead of mean) that records the order buckets are launched in.
// MiB to bytes; a size no bucket can have is a ConfigError, not an undefined conversion of NaN, an
// infinity or 1e300 MiB to integer bytes.
TEST(BucketCaps, MiBBecomeBytesAndASizeNoBucketCanHaveIsAConfigError) {
  const auto caps =
      dpt::bucket_caps(dpt::ReducerOptions().first_bucket_cap_mb(1).bucket_cap_mb(25).last_bucket_cap_mb(0.5));
  EXPECT_EQ(std::vector<int64_t>({caps.first, caps.rest, caps.last}),
            std::vector<int64_t>({1 << 20, 25 << 20, 1 << 19}));
  EXPECT_EQ(dpt::bucket_caps(dpt::ReducerOptions().bucket_cap_mb(1024 * 1024)).rest, int64_t{1} << 40);  // 1 TiB
  for (double mb : {0.0, -1.0, std::nan(""), std::numeric_limits<double>::infinity(), 1e300, 1024.0 * 1024 + 1}) {
    EXPECT_THROW(dpt::bucket_caps(dpt::ReducerOptions().bucket_cap_mb(mb)), dpt::ConfigError) << mb;
    EXPECT_THROW(dpt::bucket_caps(dpt::ReducerOptions().first_bucket_cap_mb(mb)), dpt::ConfigError) << mb;
    EXPECT_THROW(dpt::bucket_caps(dpt::ReducerOptions().last_bucket_cap_mb(mb)), dpt::ConfigError) << mb;
  }
}

TEST(Reducer, LaunchesBucketsInOrderAndLeavesTheReducedGradientInGrad) {
  dpt::testing::run_ranks(2, [](dpt::dist::Communicator& comm) {
    torch::nn::Sequential model(torch::nn::Linear(4, 8), torch::nn::Linear(8, 2));
    std::vector<dpt::NamedParameter> params;
    for (const auto& p : model->named_parameters()) params.push_back({p.key(), p.value()});
    // 4-byte limits: one bucket per parameter, the last registered first.
    dpt::Reducer reducer(params, {std::shared_ptr<void>(), &comm},
                         dpt::ReducerOptions()
                             .first_bucket_cap_mb(4.0 / (1 << 20))
                             .bucket_cap_mb(4.0 / (1 << 20))
                             .last_bucket_cap_mb(4.0 / (1 << 20)));
    ASSERT_EQ(reducer.bucket_indices(), (Buckets{{3}, {2}, {1}, {0}}));
    std::vector<int64_t> launched;
    reducer.set_comm_hook([&launched](dpt::dist::Communicator& c, const dpt::GradBucket& bucket) {
      launched.push_back(bucket.buffer.numel());
      return dpt::PendingReduction(c.all_reduce_async(bucket.buffer, dpt::dist::ReduceOp::Sum));
    });
    const at::Tensor x = at::full({3, 4}, comm.rank() + 1.0);

    // Not armed: a local backward, nothing launched.
    model->forward(x).sum().backward();
    EXPECT_TRUE(launched.empty());
    const at::Tensor local_bias_grad = model[1]->as<torch::nn::Linear>()->bias.grad().clone();
    EXPECT_TRUE(local_bias_grad.equal(at::full({2}, 3.0)));

    for (auto& p : model->parameters()) p.mutable_grad().zero_();
    reducer.prepare_for_backward();
    model->forward(x).sum().backward();
    EXPECT_EQ(launched, (std::vector<int64_t>{2, 16, 8, 32}));
    // d(sum)/d(bias) is the batch size on each rank: 3 + 3 after the summing hook.
    EXPECT_TRUE(model[1]->as<torch::nn::Linear>()->bias.grad().equal(at::full({2}, 6.0)));
    EXPECT_FALSE(reducer.armed());
  });
}

// backward_passes(3): two backward passes accumulate locally (counted per pass, not per
// parameter: the second uses only the last layer), the third reduces the sum of all three.
TEST(Reducer, ReducesOnceAfterTheConfiguredNumberOfBackwardPasses) {
  dpt::testing::run_ranks(2, [](dpt::dist::Communicator& comm) {
    torch::nn::Linear first(4, 8), last(8, 2);
    std::vector<dpt::NamedParameter> params;
    for (const auto& p : first->named_parameters()) params.push_back({"first." + p.key(), p.value()});
    for (const auto& p : last->named_parameters()) params.push_back({"last." + p.key(), p.value()});
    dpt::Reducer reducer(params, {std::shared_ptr<void>(), &comm},
                         dpt::ReducerOptions().backward_passes(3));
    int launches = 0;
    reducer.set_comm_hook([&launches](dpt::dist::Communicator& c, const dpt::GradBucket& bucket) {
      ++launches;
      return dpt::PendingReduction(c.all_reduce_async(bucket.buffer, dpt::dist::ReduceOp::Sum));
    });
    const at::Tensor x = at::full({3, 4}, comm.rank() + 1.0);
    reducer.prepare_for_backward();
    last->forward(first->forward(x)).sum().backward();
    EXPECT_EQ(reducer.accumulated_passes(), 1);
    last->forward(at::ones({3, 8})).sum().backward();
    EXPECT_EQ(reducer.accumulated_passes(), 2);
    EXPECT_EQ(launches, 0);
    EXPECT_TRUE(reducer.armed());
    last->forward(first->forward(x)).sum().backward();
    EXPECT_EQ(launches, 1);
    EXPECT_FALSE(reducer.armed());
    // Per rank, d(sum)/d(last.bias) is the batch size (3) in each pass: 3 passes on 2 ranks.
    EXPECT_TRUE(last->bias.grad().equal(at::full({2}, 18.0)));
  });
}

// rebucket() between steps: one bucket per parameter, then the first (tiny) bucket and one for the
// rest (those under the middle limit, now 1 MiB). The gradient the
// last step left in .grad moves into the new bucket (an optimizer may still read it), and the next
// step reduces through the new layout.
TEST(Reducer, RebucketsBetweenStepsKeepingTheGradients) {
  dpt::testing::run_ranks(2, [](dpt::dist::Communicator& comm) {
    torch::nn::Sequential model(torch::nn::Linear(4, 8), torch::nn::Linear(8, 2));
    std::vector<dpt::NamedParameter> params;
    for (const auto& p : model->named_parameters()) params.push_back({p.key(), p.value()});
    const double tiny_mb = 4.0 / (1 << 20);
    dpt::Reducer reducer(
        params, {std::shared_ptr<void>(), &comm},
        dpt::ReducerOptions().first_bucket_cap_mb(tiny_mb).bucket_cap_mb(tiny_mb).last_bucket_cap_mb(1));
    std::vector<int64_t> launched;
    reducer.set_comm_hook([&launched](dpt::dist::Communicator& c, const dpt::GradBucket& bucket) {
      launched.push_back(bucket.buffer.numel());
      return dpt::PendingReduction(c.all_reduce_async(bucket.buffer, dpt::dist::ReduceOp::Sum));
    });
    const at::Tensor x = at::full({3, 4}, comm.rank() + 1.0);
    const auto& bias = model[1]->as<torch::nn::Linear>()->bias;
    reducer.prepare_for_backward();
    model->forward(x).sum().backward();
    EXPECT_EQ(launched, (std::vector<int64_t>{2, 16, 8, 32}));
    const at::Tensor first_step_weight_grad = model[0]->as<torch::nn::Linear>()->weight.grad().clone();

    reducer.rebucket(1.0);
    EXPECT_EQ(reducer.bucket_indices(), (Buckets{{3}, {2, 1, 0}}));
    EXPECT_TRUE(bias.grad().equal(at::full({2}, 6.0)));
    reducer.prepare_for_backward();  // the gradients move into the new bucket, unchanged
    EXPECT_TRUE(model[0]->as<torch::nn::Linear>()->weight.grad().equal(first_step_weight_grad));
    EXPECT_EQ(bias.grad().data_ptr(), reducer.bucket_buffer(0).data_ptr());  // bias (3) is bucket 0's
    for (auto& p : model->parameters()) p.mutable_grad().zero_();
    launched.clear();
    model->forward(x).sum().backward();
    EXPECT_EQ(launched, (std::vector<int64_t>{2, 56}));
    EXPECT_TRUE(bias.grad().equal(at::full({2}, 6.0)));
    EXPECT_TRUE(model[0]->as<torch::nn::Linear>()->weight.grad().equal(first_step_weight_grad));
  });
}

}  // namespace
