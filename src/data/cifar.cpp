#include "dptrain/data/cifar.h"

#include <filesystem>

#include "dptrain/common/error.h"

namespace dpt::data {

namespace {
constexpr int kPlane = kCifarSide * kCifarSide;
}

std::vector<std::string> cifar_files(bool train) {
  if (!train) return {"test_batch.bin"};
  return {"data_batch_1.bin", "data_batch_2.bin", "data_batch_3.bin", "data_batch_4.bin", "data_batch_5.bin"};
}

Cifar10::Cifar10(const std::string& root, bool train, Transform transform) : transform_(std::move(transform)) {
  DPT_CHECK(std::filesystem::is_directory(root), DataError, "CIFAR-10 folder ", root,
            " does not exist; expected the binary version (cifar-10-batches-bin)");
  for (const auto& file : cifar_files(train)) {
    const std::string path = (std::filesystem::path(root) / file).string();
    append(read_file(path), path);
  }
}

Cifar10::Cifar10(std::vector<uint8_t> records, const std::string& name, Transform transform)
    : transform_(std::move(transform)) {
  append(std::move(records), name);
}

void Cifar10::append(std::vector<uint8_t> bytes, const std::string& name) {
  const int64_t size = static_cast<int64_t>(bytes.size());
  DPT_CHECK(size > 0 && size % kCifarRecordBytes == 0, DataError, "CIFAR-10 file ", name, " has ", size,
            " bytes, which is not a positive multiple of the ", kCifarRecordBytes,
            "-byte record (the standard files have 30730000 bytes); is it the binary version, complete?");
  const int64_t records = size / kCifarRecordBytes;
  const auto file = static_cast<int32_t>(files_.size());
  for (int64_t r = 0; r < records; ++r) {
    const int label = bytes[r * kCifarRecordBytes];
    DPT_CHECK(label < kCifarClasses, DataError, "CIFAR-10 file ", name, " record ", r, " has label ", label,
              ", expected 0-9; the file is corrupt or not CIFAR-10");
    where_.emplace_back(file, static_cast<int32_t>(r));
    labels_.push_back(label);
  }
  files_.push_back(std::move(bytes));
  names_.push_back(name);
}

Image Cifar10::image(int64_t index) const {
  check_index(index);
  const auto [file, record] = where_[index];
  const uint8_t* planes = files_[file].data() + record * kCifarRecordBytes + 1;
  Image image;
  image.width = image.height = kCifarSide;
  image.pixels.resize(3 * kPlane);
  for (int i = 0; i < kPlane; ++i) {
    for (int c = 0; c < 3; ++c) image.pixels[3 * i + c] = planes[c * kPlane + i];
  }
  return image;
}

int64_t Cifar10::get(int64_t index, int64_t epoch, float* out) const {
  transform_.apply(image(index), epoch, index, out);
  return labels_[index];
}

std::string Cifar10::describe(int64_t index) const {
  check_index(index);
  return str(names_[where_[index].first], " record ", where_[index].second);
}

std::vector<uint8_t> cifar_records(const std::vector<Image>& images, const std::vector<int64_t>& labels) {
  DPT_CHECK(images.size() == labels.size(), ConfigError, "cifar_records: ", images.size(), " images but ",
            labels.size(), " labels");
  std::vector<uint8_t> out;
  out.reserve(images.size() * kCifarRecordBytes);
  for (size_t n = 0; n < images.size(); ++n) {
    const Image& im = images[n];
    DPT_CHECK(im.width == kCifarSide && im.height == kCifarSide, ConfigError, "cifar_records: image ", n, " is ",
              im.width, "x", im.height, ", expected 32x32");
    DPT_CHECK(labels[n] >= 0 && labels[n] < kCifarClasses, ConfigError, "cifar_records: label ", labels[n],
              " of image ", n, " is outside 0-9");
    out.push_back(static_cast<uint8_t>(labels[n]));
    for (int c = 0; c < 3; ++c) {
      for (int i = 0; i < kPlane; ++i) out.push_back(im.pixels[3 * i + c]);
    }
  }
  return out;
}

}  // namespace dpt::data
