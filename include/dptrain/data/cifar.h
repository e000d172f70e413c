#pragma once
// CIFAR-10 in its binary distribution: data_batch_1.bin .. data_batch_5.bin (train) and
// test_batch.bin (test), each a run of 3073-byte records: one label byte (0-9), then the 32x32
// image as 1024 red, 1024 green and 1024 blue bytes, rows top to bottom.
//
//   dpt::data::Cifar10 train("/data/cifar-10-batches-bin", /*train=*/true,
//                            dpt::data::Transform(TransformOptions().size(32).resize(32)));
//   // Writing: records from images and labels, e.g. for a synthetic set.
//   dpt::data::write_file(path, dpt::data::cifar_records(images, labels));

#include <string>
#include <vector>

#include "dptrain/data/dataset.h"
#include "dptrain/data/transform.h"

namespace dpt::data {

constexpr int kCifarSide = 32;
constexpr int64_t kCifarRecordBytes = 1 + 3 * kCifarSide * kCifarSide;
constexpr int64_t kCifarClasses = 10;

// The file names of one split, in reading order.
std::vector<std::string> cifar_files(bool train);

class Cifar10 : public Dataset {
 public:
  // Reads and checks every file of the split (whole files are a few tens of MB). Throws DataError
  // naming the file when one is missing, unreadable, or not a whole number of records, or holds a
  // label above 9.
  Cifar10(const std::string& root, bool train, Transform transform);
  // Records already in memory, as if read from a file called `name`.
  Cifar10(std::vector<uint8_t> records, const std::string& name, Transform transform);

  int64_t size() const override { return static_cast<int64_t>(labels_.size()); }
  int64_t num_classes() const override { return kCifarClasses; }
  std::vector<int64_t> sample_shape() const override { return transform_.sample_shape(); }
  int64_t get(int64_t index, int64_t epoch, float* out) const override;
  std::string describe(int64_t index) const override;

  int64_t label(int64_t index) const { return labels_.at(index); }
  Image image(int64_t index) const;

 private:
  void append(std::vector<uint8_t> bytes, const std::string& name);

  Transform transform_;
  std::vector<std::vector<uint8_t>> files_;  // raw records, one entry per file
  std::vector<std::string> names_;
  // Per sample: which file and which record in it, and the label.
  std::vector<std::pair<int32_t, int32_t>> where_;
  std::vector<int64_t> labels_;
};

// Records for 32x32 images with labels 0-9, ready to write as a CIFAR-10 binary file.
std::vector<uint8_t> cifar_records(const std::vector<Image>& images, const std::vector<int64_t>& labels);

}  // namespace dpt::data
