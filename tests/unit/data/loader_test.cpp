#include "dptrain/data/loader.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <condition_variable>
#include <mutex>
#include <filesystem>
#include <map>
#include <fstream>
#include <set>

#include "dptrain/common/error.h"
#include "dptrain/common/text.h"
#include "dptrain/data/image_folder.h"
#include "dptrain/data/synthetic.h"
#include "support/faulty_dataset.h"
#include "support/small_synthetic.h"
#include "support/temp_dir.h"
#include "support/test_images.h"

using namespace dpt::data;
using dpt::testing::FaultyDataset;
using dpt::testing::small_synthetic;
namespace fs = std::filesystem;

namespace {

std::vector<int64_t> iota(int64_t n) {
  std::vector<int64_t> v(n);
  for (int64_t i = 0; i < n; ++i) v[i] = n - 1 - i;  // reversed, so order comes from the list
  return v;
}

std::vector<Batch> drain(Loader& loader) {
  std::vector<Batch> out;
  while (auto b = loader.next()) out.push_back(std::move(*b));
  return out;
}

// Counts the samples being read at once. Each read waits (up to a second, once) until `wanted`
// reads are under way together, so that a loader that lets fewer threads work shows it.
class Concurrency : public Dataset {
 public:
  explicit Concurrency(int wanted) : inner_(small_synthetic(64, 9)), wanted_(wanted) {}
  int64_t size() const override { return inner_->size(); }
  int64_t num_classes() const override { return inner_->num_classes(); }
  std::vector<int64_t> sample_shape() const override { return inner_->sample_shape(); }
  int64_t get(int64_t index, int64_t epoch, float* out) const override {
    {
      std::unique_lock<std::mutex> lock(mutex_);
      most_ = std::max(most_, ++reading_);
      changed_.notify_all();
      if (!waited_) waited_ = !changed_.wait_for(lock, std::chrono::seconds(1), [&] { return most_ >= wanted_; });
    }
    const int64_t label = inner_->get(index, epoch, out);
    std::lock_guard<std::mutex> lock(mutex_);
    --reading_;
    return label;
  }
  std::string describe(int64_t index) const override { return inner_->describe(index); }
  int most() const {
    std::lock_guard<std::mutex> lock(mutex_);
    return most_;
  }

 private:
  std::shared_ptr<const Dataset> inner_;
  int wanted_;
  mutable std::mutex mutex_;
  mutable std::condition_variable changed_;
  mutable int reading_ = 0, most_ = 0;
  mutable bool waited_ = false;  // the wait timed out: no more waiting
};

// Counts the samples read for each epoch, and lets a test wait for a count.
class EpochReads : public Dataset {
 public:
  EpochReads() : inner_(small_synthetic(64, 9)) {}
  int64_t size() const override { return inner_->size(); }
  int64_t num_classes() const override { return inner_->num_classes(); }
  std::vector<int64_t> sample_shape() const override { return inner_->sample_shape(); }
  int64_t get(int64_t index, int64_t epoch, float* out) const override {
    const int64_t label = inner_->get(index, epoch, out);
    std::lock_guard<std::mutex> lock(mutex_);
    if (reads_[epoch]++ == 0) events_.push_back(dpt::str("reads ", epoch));
    read_.notify_all();
    return label;
  }
  std::string describe(int64_t index) const override { return inner_->describe(index); }
  void will_read(int64_t epoch, const std::vector<int64_t>& indices) const override {
    std::lock_guard<std::mutex> lock(mutex_);
    events_.push_back(dpt::str("said ", epoch, " (", indices.size(), " samples)"));
  }
  void starts_reading(int64_t epoch) const override {
    std::lock_guard<std::mutex> lock(mutex_);
    events_.push_back(dpt::str("starts ", epoch));
  }
  // Whether `count` samples of `epoch` were read within a minute.
  bool wait_for(int64_t epoch, int count) const {
    std::unique_lock<std::mutex> lock(mutex_);
    return read_.wait_for(lock, std::chrono::minutes(1), [&] { return reads_[epoch] >= count; });
  }
  // What the loader said and did, in order: "said E (N samples)", "starts E", and each epoch's
  // first read, "reads E".
  std::vector<std::string> events() const {
    std::lock_guard<std::mutex> lock(mutex_);
    return events_;
  }

 private:
  std::shared_ptr<const Dataset> inner_;
  mutable std::mutex mutex_;
  mutable std::condition_variable read_;
  mutable std::map<int64_t, int> reads_;
  mutable std::vector<std::string> events_;
};

}  // namespace

TEST(Loader, OutputDoesNotDependOnThreadCount) {
  auto ds = small_synthetic(23, 9);
  Loader one(ds, iota(23), 1, LoaderOptions().batch_size(4).threads(1));
  Loader three(ds, iota(23), 1, LoaderOptions().batch_size(4).threads(3).prefetch_factor(1));
  auto a = drain(one), b = drain(three);
  ASSERT_EQ(a.size(), 6u);
  ASSERT_EQ(b.size(), 6u);
  for (size_t k = 0; k < a.size(); ++k) {
    EXPECT_EQ(a[k].number, static_cast<int64_t>(k));
    EXPECT_EQ(a[k].indices, b[k].indices);
    EXPECT_TRUE(a[k].images.equal(b[k].images)) << "batch " << k;
    EXPECT_TRUE(a[k].labels.equal(b[k].labels)) << "batch " << k;
  }
  EXPECT_EQ(a[0].indices, (std::vector<int64_t>{22, 21, 20, 19}));
  EXPECT_EQ(a[0].images.sizes(), (std::vector<int64_t>{4, 3, 8, 8}));
  EXPECT_EQ(a[5].images.size(0), 3);
  EXPECT_EQ(a[0].labels[0].item<int64_t>(), 22 % 5);
  // Each sample is what the dataset gives for it on its own.
  std::vector<float> alone(ds->sample_numel());
  ds->get(20, 1, alone.data());
  EXPECT_TRUE(a[0].images[2].flatten().equal(at::from_blob(alone.data(), {ds->sample_numel()})));
}

// Every thread has a batch to build at once, however many there are: with a fixed prefetch of 4
// batches, 8 threads built 4 batches at a time, and a GPU machine's loader ran at 4 threads' rate.
TEST(Loader, EveryThreadBuildsABatchAtOnce) {
  for (int threads : {1, 8}) {
    auto ds = std::make_shared<Concurrency>(threads);
    Loader loader(ds, iota(64), 0, LoaderOptions().batch_size(1).threads(threads));
    EXPECT_EQ(drain(loader).size(), 64u);
    EXPECT_EQ(ds->most(), threads) << threads << " threads";
  }
  EXPECT_THROW(Loader(small_synthetic(4, 9), iota(4), 0, LoaderOptions().prefetch_factor(0)), dpt::ConfigError);
}

// Buffers of batches the consumer has dropped are reused; batches still held never are.
TEST(Loader, ReusesOnlyReleasedBuffers) {
  auto ds = small_synthetic(24, 9);
  Loader held(ds, iota(24), 0, LoaderOptions().batch_size(2).threads(1));
  auto kept = drain(held);
  Loader reusing(ds, iota(24), 0, LoaderOptions().batch_size(2).threads(2).prefetch_factor(1));
  std::vector<Batch> every_third;
  for (size_t k = 0; auto batch = reusing.next(); ++k) {
    EXPECT_TRUE(batch->images.equal(kept[k].images)) << "batch " << k;
    if (k % 3 == 0) every_third.push_back(std::move(*batch));
  }
  for (auto& b : every_third) EXPECT_TRUE(b.images.equal(kept[b.number].images)) << "batch " << b.number;
}

// From 1 to kMaxLoaderThreads threads: a count in the hundred thousands started threads until the
// system refused one, and ended the program (the started threads were destroyed unjoined).
TEST(Loader, ThreadCountsOutsideOneToTheMostAreConfigErrors) {
  for (int threads : {0, -1, kMaxLoaderThreads + 1, 100000}) {
    EXPECT_THROW(Loader(small_synthetic(4, 9), iota(4), 0, LoaderOptions().threads(threads)), dpt::ConfigError)
        << threads;
  }
  Loader most(small_synthetic(4, 9), iota(4), 0, LoaderOptions().batch_size(4).threads(kMaxLoaderThreads));
  EXPECT_EQ(drain(most).size(), 1u);
}

TEST(Loader, DropLast) {
  Loader loader(small_synthetic(10, 9), iota(10), 0, LoaderOptions().batch_size(4).drop_last(true));
  EXPECT_EQ(loader.num_batches(), 2);
  EXPECT_EQ(drain(loader).size(), 2u);
}

TEST(Loader, SkipsBadSamplesAndCountsThem) {
  Loader loader(std::make_shared<FaultyDataset>(10, 5), iota(10), 0, LoaderOptions().batch_size(4).threads(2));
  auto batches = drain(loader);
  ASSERT_EQ(batches.size(), 3u);
  EXPECT_EQ(batches[1].indices, (std::vector<int64_t>{4, 3, 2}));
  EXPECT_EQ(batches[1].images.size(0), 3);
  EXPECT_EQ(batches[1].labels[1].item<int64_t>(), 3);  // labels stay with their images
  auto skipped = loader.skipped();
  ASSERT_EQ(skipped.size(), 1u);
  EXPECT_EQ(skipped[0].index, 5);
  EXPECT_EQ(skipped[0].what, "cannot decode JPEG broken.jpg: bad Huffman table");
}

TEST(Loader, RethrowsWorkerErrorsWithTheirText) {
  Loader strict(std::make_shared<FaultyDataset>(10, 5), iota(10), 0,
                LoaderOptions().batch_size(4).bad_image_policy(BadImagePolicy::Error));
  EXPECT_TRUE(strict.next().has_value());
  try {
    strict.next();
    FAIL() << "no error";
  } catch (const dpt::DataError& e) {
    EXPECT_EQ(std::string(e.what()), "cannot decode JPEG broken.jpg: bad Huffman table");
  }
  Loader crashing(std::make_shared<FaultyDataset>(10, 3, true), iota(10), 0, LoaderOptions().batch_size(4));
  crashing.next();
  EXPECT_THROW(
      {
        try {
          crashing.next();
        } catch (const std::runtime_error& e) {
          EXPECT_EQ(std::string(e.what()), "worker blew up on sample 3");
          throw;
        }
      },
      std::runtime_error);
}

// A queued epoch's batches are those of a loader started for it alone, numbered from 0, and
// the loader ends each epoch apart.
TEST(Loader, AQueuedEpochGivesTheBatchesOfItsOwnLoader) {
  auto ds = small_synthetic(23, 9);
  const std::vector<int64_t> first_order = iota(23);
  const std::vector<int64_t> second_order(first_order.rbegin(), first_order.rend());
  Loader chained(ds, first_order, 1, LoaderOptions().batch_size(4).threads(3).prefetch_factor(1));
  chained.queue_epoch(second_order, 2);
  EXPECT_EQ(chained.num_batches(), 6);
  ASSERT_TRUE(chained.next().has_value());
  EXPECT_THROW(chained.next_epoch(), dpt::ConfigError);  // five batches of epoch 1 left
  auto first = drain(chained);
  EXPECT_EQ(first.size(), 5u);
  ASSERT_TRUE(chained.next_epoch());
  EXPECT_EQ(chained.epoch(), 2);
  auto second = drain(chained);
  EXPECT_FALSE(chained.next_epoch());
  Loader alone(ds, second_order, 2, LoaderOptions().batch_size(4).threads(1));
  auto expected = drain(alone);
  ASSERT_EQ(second.size(), expected.size());
  for (size_t k = 0; k < expected.size(); ++k) {
    EXPECT_EQ(second[k].number, static_cast<int64_t>(k));
    EXPECT_EQ(second[k].indices, expected[k].indices);
    EXPECT_TRUE(second[k].images.equal(expected[k].images)) << "batch " << k;
  }
  // The epoch keys the augmentation: epoch 1's loader would give other pixels for that order.
  Loader other_epoch(ds, second_order, 1, LoaderOptions().batch_size(4).threads(1));
  EXPECT_FALSE(drain(other_epoch)[0].images.equal(expected[0].images));
}

// The workers go on to the queued epoch as soon as the current one's batches are under way: its
// first batches are built before the consumer moves on to it.
TEST(Loader, BuildsTheQueuedEpochAheadOfTheConsumer) {
  auto ds = std::make_shared<EpochReads>();
  Loader loader(ds, iota(8), 0, LoaderOptions().batch_size(1).threads(2).prefetch_factor(2));
  loader.queue_epoch(iota(8), 1);
  EXPECT_EQ(drain(loader).size(), 8u);
  // Four batches (2 threads x 2) of epoch 1 are built while nobody asks for them.
  EXPECT_TRUE(ds->wait_for(1, 4));
  ASSERT_TRUE(loader.next_epoch());
  EXPECT_EQ(drain(loader).size(), 8u);
}

// The loader says each epoch to the dataset as it is queued, before any of it is read (a remote
// set then fetches across the epoch's turn), and says once when its reading begins.
TEST(Loader, SaysEachEpochAsItIsQueuedAndWhenItsReadingBegins) {
  auto ds = std::make_shared<EpochReads>();
  Loader loader(ds, iota(8), 0, LoaderOptions().batch_size(1).threads(2).prefetch_factor(2));
  loader.queue_epoch(iota(6), 1);
  const std::vector<std::string> said = ds->events();
  EXPECT_NE(std::find(said.begin(), said.end(), "said 1 (6 samples)"), said.end());
  EXPECT_EQ(std::find(said.begin(), said.end(), "reads 1"), said.end());
  EXPECT_EQ(drain(loader).size(), 8u);
  ASSERT_TRUE(loader.next_epoch());
  EXPECT_EQ(drain(loader).size(), 6u);
  const std::vector<std::string> events = ds->events();
  const auto at = [&](const std::string& event) {
    EXPECT_EQ(std::count(events.begin(), events.end(), event), 1) << event;
    return std::find(events.begin(), events.end(), event) - events.begin();
  };
  EXPECT_LT(at("said 0 (8 samples)"), at("starts 0"));
  EXPECT_LT(at("starts 0"), at("reads 0"));
  EXPECT_LT(at("said 1 (6 samples)"), at("starts 1"));
  EXPECT_LT(at("starts 1"), at("reads 1"));
  EXPECT_EQ(events.size(), 6u);
}

TEST(Loader, StopsCleanlyMidEpoch) {
  for (int threads : {1, 4}) {
    Loader loader(small_synthetic(200, 9), iota(200), 0, LoaderOptions().batch_size(2).threads(threads).prefetch_factor(1));
    EXPECT_TRUE(loader.next().has_value());
  }  // the destructor joins the workers while batches are still pending
}

TEST(Loader, SkipsCorruptFilesInAnImageFolder) {
  dpt::testing::TempDir dir;
  fs::create_directories(dir.path() + "/a");
  fs::create_directories(dir.path() + "/b");
  write_file(dir.path() + "/a/good.jpg", encode_jpeg(dpt::testing::gradient_image(20, 20), 90));
  auto truncated = encode_jpeg(dpt::testing::gradient_image(20, 20, 1), 90);
  truncated.resize(truncated.size() / 2);
  write_file(dir.path() + "/a/truncated.jpg", truncated);
  std::ofstream(dir.path() + "/b/empty.jpg");
  std::ofstream(dir.path() + "/b/text.png") << "just text";
  fs::create_symlink(dir.path() + "/nowhere", dir.path() + "/b/link.jpg");  // listed, unreadable
  write_file(dir.path() + "/b/zgood.jpg", encode_jpeg(dpt::testing::gradient_image(20, 20, 2), 90));
  auto folder = std::make_shared<ImageFolder>(dir.path(), Transform(TransformOptions().resize(10).size(8)));
  ASSERT_EQ(folder->size(), 6);
  Loader loader(folder, {0, 1, 2, 3, 4, 5}, 0, LoaderOptions().batch_size(6));
  auto batches = drain(loader);
  ASSERT_EQ(batches.size(), 1u);
  EXPECT_EQ(batches[0].indices, (std::vector<int64_t>{0, 5}));
  EXPECT_EQ(batches[0].labels[1].item<int64_t>(), 1);
  auto skipped = loader.skipped();
  ASSERT_EQ(skipped.size(), 4u);
  EXPECT_NE(skipped[0].what.find("JPEG header of " + dir.path() + "/a/truncated.jpg: Premature end of JPEG file"),
            std::string::npos)
      << skipped[0].what;
  EXPECT_EQ(skipped[1].what, "image file " + dir.path() + "/b/empty.jpg is empty (0 bytes)");
  EXPECT_EQ(skipped[2].what, "cannot open " + dir.path() + "/b/link.jpg: No such file or directory");
  EXPECT_NE(skipped[3].what.find("b/text.png is neither JPEG nor PNG"), std::string::npos) << skipped[3].what;
}

// Loaders sharing a pool (one per epoch) reuse the buffers of batches their consumer let go of,
// never one a batch still holds.
TEST(Loader, SharedBufferPoolReusesReleasedBuffersOnly) {
  auto ds = small_synthetic(12, 9);
  auto pool = std::make_shared<BufferPool>();
  const auto options = LoaderOptions().batch_size(4).threads(1).prefetch_factor(1).buffer_pool(pool);
  std::set<const void*> first_epoch;
  std::optional<Batch> kept;
  {
    Loader loader(ds, iota(12), 0, options);
    while (auto b = loader.next()) {
      first_epoch.insert(b->images.data_ptr());
      if (!kept) kept = std::move(b);
    }
  }
  Loader loader(ds, iota(12), 1, options);
  int64_t count = 0;
  while (auto b = loader.next()) {
    EXPECT_NE(b->images.data_ptr(), kept->images.data_ptr()) << "batch " << b->number;
    // The first batch is built while no other batch of the first epoch but `kept` is alive.
    if (b->number == 0) {
      EXPECT_EQ(first_epoch.count(b->images.data_ptr()), 1u);
    }
    ++count;
  }
  EXPECT_EQ(count, 3);
}

// Batches asked for in bf16 and channels_last are the float batches converted (by the workers),
// and converted buffers are reused once released like float ones.
TEST(Loader, ConvertsBatchesToTheAskedTypeAndLayout) {
  auto ds = small_synthetic(10, 9);
  Loader plain(ds, iota(10), 2, LoaderOptions().batch_size(4).threads(1));
  auto expected = drain(plain);
  auto pool = std::make_shared<BufferPool>();
  Loader converting(ds, iota(10), 2,
                    LoaderOptions().batch_size(4).threads(2).dtype(at::kBFloat16).memory_format(
                        at::MemoryFormat::ChannelsLast).buffer_pool(pool));
  auto converted = drain(converting);
  ASSERT_EQ(converted.size(), expected.size());
  for (size_t k = 0; k < converted.size(); ++k) {
    const at::Tensor& images = converted[k].images;
    EXPECT_EQ(images.scalar_type(), at::kBFloat16);
    EXPECT_TRUE(images.is_contiguous(at::MemoryFormat::ChannelsLast)) << "batch " << k;
    EXPECT_FALSE(images.is_contiguous()) << "batch " << k;
    EXPECT_TRUE(images.equal(expected[k].images.to(at::kBFloat16))) << "batch " << k;
    // bf16 keeps 8 bits of mantissa: a float batch that was not converted would not compare equal.
    EXPECT_FALSE(images.to(at::kFloat).equal(expected[k].images)) << "batch " << k;
  }
  converted.clear();
  Loader again(ds, iota(10), 2,
               LoaderOptions().batch_size(4).threads(1).prefetch_factor(1).dtype(at::kBFloat16).memory_format(
                   at::MemoryFormat::ChannelsLast).buffer_pool(pool));
  auto second = drain(again);
  EXPECT_TRUE(second[0].images.equal(expected[0].images.to(at::kBFloat16)));
}
