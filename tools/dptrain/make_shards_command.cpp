// `dptrain make-shards SRC OUT`: writes an ImageFolder or CIFAR-10's binary files as tar shards
// in WebDataset's format (data/shard_writer.h). SRC with train/ and val/, or CIFAR-10's
// data_batch_*.bin and test_batch.bin (each record a PNG), gives OUT/train/ and OUT/val/, which
// `dptrain train OUT` reads as it reads the folders; any other SRC is one split, written to OUT.
// Validation keeps the folder's order (evaluation reads every sample once, in order); training
// takes --order. Prints a progress line a second to stderr and ends with one JSON line.

#include <chrono>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <mutex>
#include <nlohmann/json.hpp>
#include <thread>

#include "command.h"
#include "number_bounds.h"
#include "dptrain/common/error.h"
#include "dptrain/data/cifar.h"
#include "dptrain/data/image.h"
#include "dptrain/data/image_folder.h"
#include "dptrain/data/shard_writer.h"

namespace dpt::cli {

namespace {

namespace fs = std::filesystem;

struct MakeShardsFlags {
  std::string source;
  std::string output;
  double shard_mib = 256;
  std::string order = "shuffled";
  uint64_t seed = 0;
  int threads = static_cast<int>(std::max(1u, std::thread::hardware_concurrency()));
  int max_side = 0;
  int jpeg_quality = 90;
};

// A line to stderr at most once a second, and the last one always.
class ProgressLine {
 public:
  explicit ProgressLine(std::string split) : split_(std::move(split)) {}
  void operator()(int64_t done, int64_t total) {
    const auto now = std::chrono::steady_clock::now();
    if (done < total && now - last_ < std::chrono::seconds(1)) return;
    last_ = now;
    std::cerr << "make-shards: " << split_ << ": " << done << " of " << total << " images ("
              << (100 * done / total) << "%)" << std::endl;
  }

 private:
  std::string split_;
  std::chrono::steady_clock::time_point last_{};
};

nlohmann::json write_images(const MakeShardsFlags& f, const std::vector<data::SourceImage>& images,
                            const std::vector<std::string>& classes, const fs::path& output, const std::string& prefix,
                            const std::string& order) {
  ProgressLine progress(prefix);
  if (f.max_side > 0) {
    std::cerr << "make-shards: " << prefix << ": sizing the " << images.size() << " images at --max-side "
              << f.max_side << " first, to plan the shards" << std::endl;
  }
  const auto manifest = data::write_shards(images, classes, output.string(),
                                           data::ShardWriterOptions()
                                               .shard_bytes(static_cast<int64_t>(f.shard_mib * (1 << 20)))
                                               .prefix(prefix)
                                               .order(order)
                                               .seed(f.seed)
                                               .threads(f.threads)
                                               .max_side(f.max_side)
                                               .jpeg_quality(f.jpeg_quality)
                                               .progress(std::ref(progress)));
  int64_t bytes = 0;
  for (const auto& shard : manifest.shards) bytes += shard.bytes;
  return {{"output", output.string()}, {"samples", manifest.samples()}, {"shards", manifest.shards.size()},
          {"bytes", bytes}, {"classes", manifest.classes.size()}, {"order", order}};
}

nlohmann::json write_split(const MakeShardsFlags& f, const fs::path& source, const fs::path& output,
                           const std::string& prefix, const std::string& order) {
  // Only the listing is used: the images are copied as they are, or decoded here for --max-side.
  const data::ImageFolder folder(source.string(), data::Transform(data::TransformOptions()));
  std::vector<data::SourceImage> images;
  images.reserve(static_cast<size_t>(folder.size()));
  for (int64_t i = 0; i < folder.size(); ++i) images.push_back({folder.path(i), folder.label(i), nullptr});
  for (const auto& warning : folder.warnings()) std::cerr << "warning: " << warning << "\n";
  return write_images(f, images, folder.classes(), output, prefix, order);
}

// CIFAR-10's class names from batches.meta.txt (one a line, as the binary distribution has
// them), else "0" to "9".
std::vector<std::string> cifar_classes(const fs::path& root) {
  std::vector<std::string> names;
  std::ifstream meta(root / "batches.meta.txt");
  for (std::string line; std::getline(meta, line);) {
    if (!line.empty()) names.push_back(line);
  }
  if (static_cast<int64_t>(names.size()) == data::kCifarClasses) return names;
  names.clear();
  for (int64_t c = 0; c < data::kCifarClasses; ++c) names.push_back(std::to_string(c));
  return names;
}

// One split of CIFAR-10's binary files, each record a lossless PNG (its pixels exactly).
nlohmann::json write_cifar_split(const MakeShardsFlags& f, const fs::path& root, bool train, const fs::path& output,
                                 const std::string& prefix, const std::string& order) {
  const data::Cifar10 cifar(root.string(), train, data::Transform(data::TransformOptions()));
  std::vector<data::SourceImage> images;
  images.reserve(static_cast<size_t>(cifar.size()));
  for (int64_t i = 0; i < cifar.size(); ++i) {
    images.push_back({(root / cifar.describe(i)).string(), cifar.label(i),
                      [&cifar, i] { return data::encode_png(cifar.image(i)); }});
  }
  return write_images(f, images, cifar_classes(root), output, prefix, order);
}

int run_make_shards(const MakeShardsFlags& f) {
  const fs::path source(f.source), output(f.output);
  DPT_CHECK(fs::is_directory(source), DataError, "source folder '", f.source, "' does not exist or is not a folder");
  const auto start = std::chrono::steady_clock::now();
  nlohmann::json report = {{"source", f.source}, {"seed", f.seed}, {"shard_mib", f.shard_mib}};
  if (f.max_side > 0) {
    report["max_side"] = f.max_side;
    report["jpeg_quality"] = f.jpeg_quality;
  }
  if (fs::exists(source / data::cifar_files(true).front())) {
    report["train"] = write_cifar_split(f, source, true, output / "train", "train", f.order);
    report["val"] = write_cifar_split(f, source, false, output / "val", "val", "folder");
  } else if (fs::is_directory(source / "train") && fs::is_directory(source / "val")) {
    report["train"] = write_split(f, source / "train", output / "train", "train", f.order);
    report["val"] = write_split(f, source / "val", output / "val", "val", "folder");
  } else {
    const std::string name = source.filename().empty() ? source.parent_path().filename().string()
                                                        : source.filename().string();
    report["split"] = write_split(f, source, output, name.empty() ? "shard" : name, f.order);
  }
  report["seconds"] = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  std::cout << report.dump() << std::endl;
  return 0;
}

}  // namespace

Command add_make_shards_command(CLI::App& root) {
  auto flags = std::make_shared<MakeShardsFlags>();
  CLI::App* app = root.add_subcommand(
      "make-shards",
      "Write an ImageFolder (train/ and val/, or one split) or CIFAR-10 as WebDataset tar shards with indexes");
  app->add_option("source", flags->source,
                  "ImageFolder root (with train/ and val/, or one split), or CIFAR-10's folder of data_batch_*.bin "
                  "and test_batch.bin (each image a PNG)")
      ->required();
  app->add_option("output", flags->output, "output folder (a run over an interrupted one keeps its whole shards)")
      ->required();
  app->add_option("--shard-size", flags->shard_mib, "target size of a shard in MiB (fractions too)")
      ->check(within(0.01, 1 << 20))
      ->capture_default_str();
  app->add_option("--order", flags->order,
                  "training samples in a permutation drawn from --seed (shuffled: every shard mixes the classes) or "
                  "in the folder's order (folder: sample i is the ImageFolder's image i); validation keeps the "
                  "folder's order")
      ->check(CLI::IsMember({"shuffled", "folder"}))
      ->capture_default_str();
  app->add_option("--seed", flags->seed, "seed of the shuffled order")->capture_default_str();
  app->add_option("-j,--threads", flags->threads, "shards written at once (default: the cores)")
      ->check(within(1, 1024));
  app->add_option("--max-side", flags->max_side,
                  "resize images longer than this on either side to fit it (bilinear, antialiased, aspect kept) and "
                  "store them as JPEGs of --jpeg-quality: each epoch then decodes fewer pixels; 0 keeps the bytes")
      ->check(within(0, 1 << 16))
      ->capture_default_str();
  app->add_option("--jpeg-quality", flags->jpeg_quality, "quality of the JPEGs --max-side writes")
      ->check(within(1, 100))
      ->capture_default_str();
  return {app, [flags](const std::vector<std::string>&) { return run_make_shards(*flags); }};
}

}  // namespace dpt::cli
