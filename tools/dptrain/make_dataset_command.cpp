// `dptrain make-dataset`: writes the synthetic image set to disk, as a JPEG ImageFolder
// (OUT/train/<class>/*.jpg and OUT/val/<class>/*.jpg) or as CIFAR-10 binary files
// (OUT/data_batch_1..5.bin, OUT/test_batch.bin), so that the file-reading paths can be trained
// and tested without downloading anything. Ends with one JSON line.

#include <fmt/format.h>

#include <algorithm>
#include <filesystem>
#include <iostream>
#include <nlohmann/json.hpp>

#include "command.h"
#include "number_bounds.h"
#include "dptrain/common/error.h"
#include "dptrain/data/cifar.h"
#include "dptrain/data/image.h"
#include "dptrain/data/synthetic.h"

namespace dpt::cli {

namespace {

namespace fs = std::filesystem;

// Each image is drawn whole in memory before it is encoded: 48 MiB at this side.
constexpr int kMaxImageSide = 4096;

struct MakeDatasetFlags {
  std::string output;
  std::string format = "imagefolder";
  int64_t train_size = 1000;
  int64_t val_size = 200;
  int64_t classes = 10;
  int image_size = 64;
  int quality = 90;
  uint64_t seed = 0;
};

// The untransformed images of one split; the validation split uses the next seed.
data::SyntheticDataset split(const MakeDatasetFlags& f, int64_t size, uint64_t seed, int image_size) {
  return data::SyntheticDataset(
      data::SyntheticOptions().size(size).num_classes(f.classes).image_size(image_size).seed(seed),
      data::Transform(data::TransformOptions().size(image_size).resize(image_size)));
}

void write_image_folder(const MakeDatasetFlags& f, const std::string& dir, int64_t size, uint64_t seed) {
  const auto ds = split(f, size, seed, f.image_size);
  for (int64_t c = 0; c < f.classes; ++c) fs::create_directories(fs::path(dir) / fmt::format("class_{:03d}", c));
  for (int64_t i = 0; i < size; ++i) {
    const auto path = fs::path(dir) / fmt::format("class_{:03d}", ds.label(i)) / fmt::format("{:07d}.jpg", i);
    data::write_file(path.string(), data::encode_jpeg(ds.render(i), f.quality));
  }
}

void write_cifar_file(const MakeDatasetFlags& f, const std::string& path, const data::SyntheticDataset& ds,
                      int64_t first, int64_t count) {
  std::vector<data::Image> images;
  std::vector<int64_t> labels;
  for (int64_t i = first; i < first + count; ++i) {
    images.push_back(ds.render(i));
    labels.push_back(ds.label(i));
  }
  data::write_file(path, data::cifar_records(images, labels));
}

// Whether `dir` exists and holds anything.
bool holds_files(const fs::path& dir) {
  std::error_code error;
  return fs::is_directory(dir, error) && !fs::is_empty(dir, error);
}

// The flags' agreement, checked once they are parsed: nothing is written before.
void check_make_dataset_flags(const MakeDatasetFlags& f) {
  if (f.format == "imagefolder") {
    // An earlier set's other classes and numbers would stay beside this one's (a 5-class set
    // rewritten with 2 classes read back as 5), and OUTPUT may be a real dataset: neither is
    // overwritten or deleted.
    for (const char* split : {"train", "val"}) {
      const fs::path dir = fs::path(f.output) / split;
      DPT_CHECK(!holds_files(dir), ConfigError, dir.string(), " already holds files, which would mix with the new ",
                "images: choose an empty or new folder, or remove ", (fs::path(f.output) / "train").string(), " and ",
                (fs::path(f.output) / "val").string(), " first");
    }
    // Sample i is of class i % classes: a class past a split's size would be an empty folder, which
    // ImageFolder refuses (and a class count in the billions filled the disk with them).
    DPT_CHECK(f.classes <= std::min(f.train_size, f.val_size), ConfigError, "--classes ", f.classes,
              " needs at least one image of each class in both splits, got --train-size ", f.train_size,
              " and --val-size ", f.val_size);
  } else {
    DPT_CHECK(f.classes <= data::kCifarClasses, ConfigError, "--classes must be at most 10 for CIFAR-10 files, got ",
              f.classes);
    const auto files = static_cast<int64_t>(data::cifar_files(/*train=*/true).size());
    DPT_CHECK(f.train_size >= files, ConfigError, "CIFAR-10 output needs --train-size >= ", files,
              " (one record per file at least)");
  }
}

int run_make_dataset(const MakeDatasetFlags& f) {
  fs::create_directories(f.output);
  if (f.format == "imagefolder") {
    write_image_folder(f, (fs::path(f.output) / "train").string(), f.train_size, f.seed);
    write_image_folder(f, (fs::path(f.output) / "val").string(), f.val_size, f.seed + 1);
  } else {
    const auto files = data::cifar_files(/*train=*/true);
    const auto n = static_cast<int64_t>(files.size());
    const auto train = split(f, f.train_size, f.seed, data::kCifarSide);
    for (int64_t k = 0; k < n; ++k) {
      const int64_t first = k * f.train_size / n, last = (k + 1) * f.train_size / n;
      write_cifar_file(f, (fs::path(f.output) / files[k]).string(), train, first, last - first);
    }
    const auto val = split(f, f.val_size, f.seed + 1, data::kCifarSide);
    write_cifar_file(f, (fs::path(f.output) / data::cifar_files(false)[0]).string(), val, 0, f.val_size);
  }
  nlohmann::json report = {{"output", f.output},
                           {"format", f.format},
                           {"train", f.train_size},
                           {"val", f.val_size},
                           {"classes", f.classes},
                           {"seed", f.seed},
                           {"image_size", f.format == "cifar" ? data::kCifarSide : f.image_size}};
  std::cout << report.dump() << std::endl;
  return 0;
}

}  // namespace

Command add_make_dataset_command(CLI::App& root) {
  auto flags = std::make_shared<MakeDatasetFlags>();
  CLI::App* app =
      root.add_subcommand("make-dataset", "Write the learnable synthetic image set as JPEG files or CIFAR-10 binary");
  app->add_option("output", flags->output, "output directory")->required();
  app->add_option("--format", flags->format, "imagefolder (train/ and val/ of JPEGs) or cifar (CIFAR-10 .bin files)")
      ->check(CLI::IsMember({"imagefolder", "cifar"}))
      ->capture_default_str();
  app->add_option("--train-size", flags->train_size, "training images")->check(at_least(1))->capture_default_str();
  app->add_option("--val-size", flags->val_size, "validation images")->check(at_least(1))->capture_default_str();
  app->add_option("--classes", flags->classes, "number of classes")->check(at_least(1))->capture_default_str();
  app->add_option("--image-size", flags->image_size, "side of the JPEG images (CIFAR is always 32)")
      ->check(within(8, kMaxImageSide))
      ->capture_default_str();
  app->add_option("--quality", flags->quality, "JPEG quality")->check(within(1, 100))->capture_default_str();
  app->add_option("--seed", flags->seed, "seed of the training images (validation uses seed + 1)")
      ->capture_default_str();
  app->callback([flags] { check_make_dataset_flags(*flags); });
  return {app, [flags](const std::vector<std::string>&) { return run_make_dataset(*flags); }};
}

}  // namespace dpt::cli
