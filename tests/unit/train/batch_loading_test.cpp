#include <gtest/gtest.h>

#include <memory>
#include <numeric>
#include <vector>

#include <torch/torch.h>

#include "dptrain/data/loader.h"
#include "support/small_synthetic.h"
#include "train/trainer_state.h"

using namespace dpt::train;
using dpt::testing::small_synthetic;

namespace {

std::vector<at::Tensor> images_of_epoch(const dpt::data::LoaderOptions& options) {
  std::vector<int64_t> indices(10);
  std::iota(indices.begin(), indices.end(), 0);
  dpt::data::Loader loader(small_synthetic(10, 4), indices, /*epoch=*/1, options);
  std::vector<at::Tensor> images;
  while (auto batch = loader.next()) images.push_back(batch->images);
  return images;
}

TrainOptions small_run() {
  TrainOptions options("resnet18");
  options.batch_size(4).data().workers(2).bad_images(dpt::data::BadImagePolicy::Error);
  return options;
}

}  // namespace

// The run's settings reach its loaders.
TEST(BatchLoading, TakesTheRunsSettings) {
  const auto options = batch_loading(small_run(), at::kCPU);
  EXPECT_EQ(options.batch_size(), 4);
  EXPECT_EQ(options.threads(), 2);
  EXPECT_EQ(options.bad_image_policy(), dpt::data::BadImagePolicy::Error);
  EXPECT_FALSE(options.pin_memory());
  EXPECT_EQ(options.memory_format(), at::MemoryFormat::Contiguous);
}

// --channels-last: the step is handed channels_last batches (the loader's threads converted them),
// holding the values the contiguous ones do.
TEST(BatchLoading, ChannelsLastRunsGetChannelsLastBatches) {
  const auto contiguous = images_of_epoch(batch_loading(small_run(), at::kCPU));
  const auto channels_last =
      images_of_epoch(batch_loading(small_run().channels_last(true), at::kCPU));
  ASSERT_EQ(channels_last.size(), 3u);
  ASSERT_EQ(contiguous.size(), channels_last.size());
  for (size_t k = 0; k < contiguous.size(); ++k) {
    EXPECT_TRUE(contiguous[k].is_contiguous()) << "batch " << k;
    EXPECT_TRUE(channels_last[k].is_contiguous(at::MemoryFormat::ChannelsLast)) << "batch " << k;
    EXPECT_FALSE(channels_last[k].is_contiguous()) << "batch " << k;
    EXPECT_TRUE(channels_last[k].equal(contiguous[k])) << "batch " << k;
  }
  // A GPU converts its copy of the batch itself: the loader leaves it as the dataset wrote it.
  EXPECT_EQ(batch_loading(small_run().channels_last(true), at::Device(at::kCUDA, 0)).memory_format(),
            at::MemoryFormat::Contiguous);
}
