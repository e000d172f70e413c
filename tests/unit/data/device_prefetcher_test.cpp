#include "dptrain/data/device_prefetcher.h"

#include <ATen/Context.h>
#include <gtest/gtest.h>

#if defined(DPTRAIN_WITH_CUDA)
#include <ATen/cuda/Sleep.h>
#include <c10/core/impl/VirtualGuardImpl.h>
#endif

#include <chrono>
#include <thread>

#include "dptrain/common/error.h"
#include "dptrain/data/synthetic.h"
#include "support/faulty_dataset.h"
#include "support/small_synthetic.h"

using namespace dpt::data;
using dpt::testing::small_synthetic;

namespace {

std::vector<int64_t> order(int64_t n) {
  std::vector<int64_t> v(n);
  for (int64_t i = 0; i < n; ++i) v[i] = (7 * i) % n;
  return v;
}

// Every batch of `prefetcher` equals the plain loader's, in order, moved to `device`.
void expect_same_batches(DevicePrefetcher& prefetcher, Loader& plain, at::Device device) {
  int64_t count = 0;
  while (auto expected = plain.next()) {
    auto got = prefetcher.next();
    ASSERT_TRUE(got.has_value()) << "batch " << expected->number;
    EXPECT_EQ(got->number, expected->number);
    EXPECT_EQ(got->indices, expected->indices);
    EXPECT_EQ(got->images.device(), device);
    EXPECT_EQ(got->labels.device(), device);
    EXPECT_TRUE(at::equal(got->images.cpu(), expected->images)) << "batch " << expected->number;
    EXPECT_TRUE(at::equal(got->labels.cpu(), expected->labels)) << "batch " << expected->number;
    ++count;
  }
  EXPECT_EQ(count, 6);
  EXPECT_FALSE(prefetcher.next().has_value());
  EXPECT_FALSE(prefetcher.next().has_value());
}

}  // namespace

TEST(DevicePrefetcher, CpuPassesBatchesThroughInOrder) {
  auto ds = small_synthetic(23, 4);
  const auto options = LoaderOptions().batch_size(4).threads(2);
  Loader plain(ds, order(23), 1, options), loader(ds, order(23), 1, options);
  DevicePrefetcher prefetcher(loader, DevicePrefetcherOptions(at::kCPU));
  expect_same_batches(prefetcher, plain, at::Device(at::kCPU));
}

TEST(DevicePrefetcher, CpuCountsTheLoadersSkippedSamples) {
  Loader loader(std::make_shared<dpt::testing::FaultyDataset>(10, 5), order(10), 0, LoaderOptions().batch_size(4));
  DevicePrefetcher prefetcher(loader, DevicePrefetcherOptions(at::kCPU));
  ASSERT_EQ(prefetcher.next()->number, 0);
  EXPECT_EQ(prefetcher.skipped_count(), 0);
  ASSERT_EQ(prefetcher.next()->number, 1);
  EXPECT_EQ(prefetcher.skipped_count(), 1);
  ASSERT_EQ(prefetcher.skipped().size(), 1u);
  EXPECT_EQ(prefetcher.skipped()[0].index, 5);
}

TEST(DevicePrefetcher, StopsCleanlyMidEpoch) {
  auto ds = small_synthetic(200, 4);
  Loader loader(ds, order(200), 0, LoaderOptions().batch_size(2).threads(2).prefetch_factor(1));
  DevicePrefetcher prefetcher(loader, DevicePrefetcherOptions(at::kCPU));
  ASSERT_TRUE(prefetcher.next().has_value());
  auto second = prefetcher.next();
  ASSERT_TRUE(second.has_value());
  EXPECT_EQ(second->number, 1);
  // Leaving the scope destroys the prefetcher, then the loader with its workers mid-epoch.
}

TEST(DevicePrefetcher, RejectsDeviceTypeWithoutSupport) {
  if (at::hasCUDA()) GTEST_SKIP() << "this LibTorch supports CUDA";
  auto ds = small_synthetic(4, 4);
  Loader loader(ds, order(4), 0, LoaderOptions().batch_size(2));
  try {
    DevicePrefetcher prefetcher(loader, DevicePrefetcherOptions(at::kCUDA));
    FAIL() << "expected a ConfigError";
  } catch (const dpt::ConfigError& e) {
    EXPECT_STREQ(e.what(),
                 "device prefetcher: this LibTorch has no cuda support; prefetch to the CPU or use a LibTorch build "
                 "with cuda");
  }
}

TEST(DevicePrefetcher, CopiesBatchesToTheGpu_CUDA) {
  if (!at::hasCUDA()) GTEST_SKIP() << "no CUDA device";
  auto ds = small_synthetic(23, 4);
  const auto options = LoaderOptions().batch_size(4).threads(2);
  Loader plain(ds, order(23), 1, options), loader(ds, order(23), 1, LoaderOptions(options).pin_memory(true));
  DevicePrefetcher prefetcher(loader, DevicePrefetcherOptions(at::Device(at::kCUDA, 0)));
  expect_same_batches(prefetcher, plain, at::Device(at::kCUDA, 0));
}

// The batch being copied ahead is not yet handed out: its skipped samples count from the call that
// hands it out, so that a training step reports its own. order(10) batches samples as {0, 7, 4, 1},
// {8, 5, 2, 9}, {6, 3}: sample 5 is in batch 1, sample 3 in the last one.
TEST(DevicePrefetcher, CountsTheSkippedSamplesOfTheBatchesHandedOut_CUDA) {
  if (!at::hasCUDA()) GTEST_SKIP() << "no CUDA device";
  const auto options = LoaderOptions().batch_size(4).threads(2).pin_memory(true);
  const DevicePrefetcherOptions gpu(at::Device(at::kCUDA, 0));
  {
    Loader loader(std::make_shared<dpt::testing::FaultyDataset>(10, 5), order(10), 0, options);
    DevicePrefetcher prefetcher(loader, gpu);
    ASSERT_EQ(prefetcher.next()->number, 0);  // batch 1 is copied ahead
    EXPECT_EQ(loader.skipped_count(), 1);
    EXPECT_EQ(prefetcher.skipped_count(), 0);
    EXPECT_TRUE(prefetcher.skipped().empty());
    const auto second = prefetcher.next();
    ASSERT_EQ(second->number, 1);
    EXPECT_EQ(second->images.size(0), 3);
    EXPECT_EQ(prefetcher.skipped_count(), 1);
    ASSERT_EQ(prefetcher.skipped().size(), 1u);
    EXPECT_EQ(prefetcher.skipped()[0].index, 5);
  }
  // The last batch's: nothing is copied ahead of it, and they count once it is handed out.
  Loader loader(std::make_shared<dpt::testing::FaultyDataset>(10, 3), order(10), 0, options);
  DevicePrefetcher prefetcher(loader, gpu);
  prefetcher.next();
  prefetcher.next();
  EXPECT_EQ(prefetcher.skipped_count(), 0);
  ASSERT_EQ(prefetcher.next()->number, 2);
  EXPECT_EQ(prefetcher.skipped_count(), 1);
  EXPECT_FALSE(prefetcher.next().has_value());
  ASSERT_EQ(prefetcher.skipped().size(), 1u);
  EXPECT_EQ(prefetcher.skipped()[0].index, 3);
}

#if defined(DPTRAIN_WITH_CUDA)
// The overlap itself: with the GPU busy on the consumer's stream (a kernel that spins for about a
// second), the next batch's copy, queued after that kernel, still finishes: it runs beside it on
// the side stream, from page-locked memory. On the consumer's stream it would wait behind it.
TEST(DevicePrefetcher, CopiesTheNextBatchWhileTheGpuWorks_CUDA) {
  if (!at::hasCUDA()) GTEST_SKIP() << "no CUDA device";
  const at::Device gpu(at::kCUDA, 0);
  auto ds = small_synthetic(23, 4);
  const auto options = LoaderOptions().batch_size(4).threads(2).pin_memory(true);
  Loader pinned(ds, order(23), 1, options);
  EXPECT_TRUE(pinned.next()->images.is_pinned()) << "the loader's batches are not page-locked";
  Loader plain(ds, order(23), 1, LoaderOptions(options).pin_memory(false)), loader(ds, order(23), 1, options);
  DevicePrefetcher prefetcher(loader, DevicePrefetcherOptions(gpu));
  ASSERT_TRUE(prefetcher.next().has_value());  // queues the second batch's copy
  const c10::Stream consumer = c10::impl::VirtualGuardImpl(at::kCUDA).getStream(gpu);
  at::cuda::sleep(2'000'000'000);  // cycles: about a second at an H100's clock
  auto second = prefetcher.next();  // the consumer waits for it; the third batch's copy is queued
  ASSERT_TRUE(second.has_value());
  bool third_copied_meanwhile = false;
  for (int i = 0; i < 5000 && !third_copied_meanwhile && !consumer.query(); ++i) {
    third_copied_meanwhile = prefetcher.next_ready();
    if (!third_copied_meanwhile) std::this_thread::sleep_for(std::chrono::milliseconds(1));
  }
  EXPECT_TRUE(third_copied_meanwhile) << "the copy did not run while the consumer's stream was busy";
  EXPECT_FALSE(consumer.query()) << "the spinning kernel was too short to tell";
  plain.next();
  EXPECT_TRUE(at::equal(second->images.cpu(), plain.next()->images));
}
#endif
