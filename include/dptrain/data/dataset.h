#pragma once
// What every dptrain dataset offers the loader: a size, a class count, and get(), which decodes
// and transforms one sample straight into the caller's buffer.
//
//   std::shared_ptr<dpt::data::Dataset> ds = dpt::data::ImageFolder::open("train", transform);
//   std::vector<float> sample(ds->sample_numel());
//   int64_t label = ds->get(/*index=*/3, /*epoch=*/0, sample.data());

#include <cstdint>
#include <string>
#include <vector>

namespace dpt::data {

// What to do with an image that cannot be read or decoded.
enum class BadImagePolicy {
  Error,  // throw DataError naming the file
  Skip,   // leave the sample out of its batch, count it, report the files at the end
};
// "fail" -> Error, "skip" -> Skip (the command line's names); ConfigError naming them otherwise.
BadImagePolicy parse_bad_image_policy(const std::string& name);
std::string to_string(BadImagePolicy policy);

class Dataset {
 public:
  virtual ~Dataset() = default;

  virtual int64_t size() const = 0;
  virtual int64_t num_classes() const = 0;
  // Shape of one transformed sample, {channels, height, width}.
  virtual std::vector<int64_t> sample_shape() const = 0;
  int64_t sample_numel() const;

  // Writes sample `index` (CHW float32, sample_shape()) to `out` and returns its label. Random
  // augmentation depends only on (the transform's seed, epoch, index). Safe to call from several
  // threads at once. Throws DataError naming the file when the sample cannot be read.
  virtual int64_t get(int64_t index, int64_t epoch, float* out) const = 0;

  // Where sample `index` comes from, for messages ("train/cat/001.jpg", "data_batch_2.bin#17").
  virtual std::string describe(int64_t index) const = 0;

  // Says that epoch `epoch` reads the samples of `indices` (a sampler's draws: index + copy *
  // size()) in that order, once the epochs said before it are read, so that a dataset whose
  // samples lie far away (ShardSet over HTTP or S3) fetches them ahead of need, across the turn
  // of the epoch too. An epoch said again, or one before the last said, starts over: it comes
  // from a new loader. The loader calls it as it queues each epoch; the default does nothing.
  virtual void will_read(int64_t epoch, const std::vector<int64_t>& indices) const {}
  // Says that the reading of epoch `epoch` (said with will_read) begins: the epochs before it are
  // read. The loader calls it as it starts building the epoch's first batch.
  virtual void starts_reading(int64_t epoch) const {}

 protected:
  // DataError unless 0 <= index < size().
  void check_index(int64_t index) const;
};

}  // namespace dpt::data
