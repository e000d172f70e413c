#include "dptrain/data/shard_writer.h"

#include <algorithm>
#include <cerrno>
#include <cmath>
#include <cstring>
#include <filesystem>
#include <mutex>
#include <optional>

#include "dptrain/common/atomic_file.h"
#include "dptrain/common/error.h"
#include "dptrain/common/parallel_for.h"
#include "dptrain/common/read_file.h"
#include "dptrain/common/sha256.h"
#include "dptrain/common/text.h"
#include "dptrain/data/image.h"
#include "dptrain/data/sampler.h"
#include "dptrain/data/shard_index.h"
#include "dptrain/data/tar_archive.h"
#include "resample.h"

namespace dpt::data {

namespace fs = std::filesystem;

namespace {

constexpr int64_t kBlock = 512;

// What one sample takes in a shard: the image's header and padded bytes, the label's header and
// its block.
int64_t tar_bytes(int64_t image_size) { return kBlock + (image_size + kBlock - 1) / kBlock * kBlock + 2 * kBlock; }

// Shard s holds the samples at positions [first[s], first[s + 1]) of the set's order.
struct Plan {
  std::vector<int64_t> order;  // source image of each position
  std::vector<int64_t> first;
  std::vector<int64_t> bytes;  // of each shard's tar
};

// An encoded image as a shard holds it: the source's bytes, or with max_side a JPEG resized to fit.
struct SampleBytes {
  std::vector<uint8_t> bytes;
  ImageFormat format = ImageFormat::Unknown;
};

SampleBytes sample_bytes(const SourceImage& image, const ShardWriterOptions& options) {
  auto bytes = image.encoded ? std::optional<std::vector<uint8_t>>(image.encoded())
                             : dpt::read_file<std::vector<uint8_t>>(image.path);
  DPT_CHECK(bytes, DataError, "cannot read image ", image.path, ": ", std::strerror(errno));
  const ImageFormat format = sniff_format(*bytes);
  DPT_CHECK(format != ImageFormat::Unknown, DataError, "image ", image.path,
            " is neither JPEG nor PNG; convert it, or leave it out of the source");
  const int max_side = options.max_side();
  if (max_side == 0) return {std::move(*bytes), format};
  const ImageSize size = read_image_size(*bytes, image.path);
  const int longer = std::max(size.width, size.height);
  if (longer <= max_side) return {std::move(*bytes), format};
  const auto fitted = [&](int side) {
    return std::max(1, static_cast<int>(std::lround(static_cast<double>(side) * max_side / longer)));
  };
  const Image full = decode_image(*bytes, image.path);
  const int width = fitted(full.width), height = fitted(full.height);
  const Taps h = filter_taps(Interpolation::Bilinear, 0, full.width, 0, full.width, width, 0, width);
  const Taps v = filter_taps(Interpolation::Bilinear, 0, full.height, 0, full.height, height, 0, height);
  Image resized;
  resample_to_image(full, 0, 0, h, v, /*flip=*/false, resized);
  return {encode_jpeg(resized, options.jpeg_quality()), ImageFormat::Jpeg};
}

// Each sample's size in a shard, in the set's order: the files' sizes, or with max_side or a
// source in memory the encoded images' (encoded on `threads` threads and dropped).
std::vector<int64_t> sample_sizes(const std::vector<SourceImage>& images, const std::vector<int64_t>& order,
                                  const ShardWriterOptions& options) {
  std::vector<int64_t> sizes(order.size());
  const bool all_files =
      std::none_of(images.begin(), images.end(), [](const SourceImage& image) { return bool(image.encoded); });
  if (options.max_side() == 0 && all_files) {
    for (size_t k = 0; k < order.size(); ++k) {
      std::error_code error;
      const std::string& path = images[order[k]].path;
      const auto size = fs::file_size(path, error);
      DPT_CHECK(!error, DataError, "cannot read image ", path, ": ", error.message());
      sizes[k] = static_cast<int64_t>(size);
    }
    return sizes;
  }
  parallel_for(order.size(), options.threads(), [&](size_t k) {
    sizes[k] = static_cast<int64_t>(sample_bytes(images[order[k]], options).bytes.size());
  });
  return sizes;
}

Plan plan_shards(const std::vector<SourceImage>& images, const ShardWriterOptions& options) {
  Plan plan;
  const auto n = static_cast<int64_t>(images.size());
  if (options.order() == "shuffled") {
    plan.order = seeded_permutation(n, options.seed());
  } else {
    for (int64_t i = 0; i < n; ++i) plan.order.push_back(i);
  }
  const std::vector<int64_t> sizes = sample_sizes(images, plan.order, options);
  plan.first.push_back(0);
  int64_t shard_size = 2 * kBlock;  // the end blocks
  for (int64_t k = 0; k < n; ++k) {
    const int64_t sample = tar_bytes(sizes[k]);
    if (k > plan.first.back() && shard_size + sample > options.shard_bytes()) {
      plan.first.push_back(k);
      plan.bytes.push_back(shard_size);
      shard_size = 2 * kBlock;
    }
    shard_size += sample;
  }
  plan.first.push_back(n);
  plan.bytes.push_back(shard_size);
  return plan;
}

std::string key_of(int64_t position) { return zero_padded(position, 9); }

// The shard's tar and index as they are on disk when a run before wrote them whole.
std::optional<ShardFile> kept_shard(const fs::path& tar, const fs::path& idx, int64_t samples, int64_t bytes) {
  std::error_code error;
  if (fs::file_size(tar, error) != static_cast<uintmax_t>(bytes) || error) return std::nullopt;
  const auto text = dpt::read_file<std::string>(idx.string());
  if (!text) return std::nullopt;
  try {
    const ShardIndex index = parse_shard_index(*text, idx.string());
    if (index.archive_size != bytes || static_cast<int64_t>(index.samples.size()) != samples) return std::nullopt;
  } catch (const DataError&) {
    return std::nullopt;
  }
  const auto contents = dpt::read_file<std::string>(tar.string());
  if (!contents) return std::nullopt;
  return ShardFile{tar.filename().string(), samples, bytes, hex(sha256(*contents))};
}

ShardFile write_shard(const std::vector<SourceImage>& images, const Plan& plan, size_t s, const fs::path& tar_path,
                      const fs::path& idx_path, const ShardWriterOptions& options) {
  std::string tar_bytes;
  tar_bytes.reserve(static_cast<size_t>(plan.bytes[s]));
  TarWriter tar([&](const char* data, size_t size) { tar_bytes.append(data, size); });
  ShardIndex index;
  for (int64_t k = plan.first[s]; k < plan.first[s + 1]; ++k) {
    const SourceImage& image = images[plan.order[k]];
    const SampleBytes sample = sample_bytes(image, options);
    const std::string extension = sample.format == ImageFormat::Jpeg ? "jpg" : "png";
    const std::string key = key_of(k);
    index.samples.push_back(
        {key, extension, tar.size() + kBlock, static_cast<int64_t>(sample.bytes.size()), image.label});
    tar.add(key + "." + extension, reinterpret_cast<const char*>(sample.bytes.data()), sample.bytes.size());
    tar.add(key + ".cls", std::to_string(image.label));
  }
  tar.finish();
  index.archive_size = tar.size();
  write_file_atomically(tar_path, [&](const ByteWriter& write) { write(tar_bytes.data(), tar_bytes.size()); });
  const std::string idx_text = format_shard_index(index);
  write_file_atomically(idx_path, [&](const ByteWriter& write) { write(idx_text.data(), idx_text.size()); });
  return {tar_path.filename().string(), plan.first[s + 1] - plan.first[s], tar.size(), hex(sha256(tar_bytes))};
}

}  // namespace

ShardManifest write_shards(const std::vector<SourceImage>& images, const std::vector<std::string>& classes,
                           const std::string& out_dir, const ShardWriterOptions& options) {
  DPT_CHECK(!images.empty(), DataError, "no images to write as shards");
  DPT_CHECK(options.order() == "shuffled" || options.order() == "folder", ConfigError, "shard order '",
            options.order(), "' is neither 'shuffled' nor 'folder'");
  DPT_CHECK(options.shard_bytes() >= 10 * kBlock, ConfigError, "shard size must be at least 5 KiB, got ",
            options.shard_bytes(), " bytes");
  DPT_CHECK(options.threads() >= 1, ConfigError, "shard writer threads must be at least 1, got ", options.threads());
  DPT_CHECK(options.max_side() >= 0, ConfigError, "the largest side must be 0 (keep the images) or positive, got ",
            options.max_side());
  DPT_CHECK(options.jpeg_quality() >= 1 && options.jpeg_quality() <= 100, ConfigError,
            "JPEG quality must be within 1..100, got ", options.jpeg_quality());
  for (const auto& image : images) {
    DPT_CHECK(image.label >= 0 && image.label < static_cast<int64_t>(classes.size()), DataError, "image ", image.path,
              " has label ", image.label, " outside the ", classes.size(), " classes");
  }
  fs::create_directories(out_dir);
  const Plan plan = plan_shards(images, options);
  const size_t shards = plan.bytes.size();
  ShardManifest manifest;
  manifest.classes = classes;
  manifest.order = options.order();
  manifest.seed = options.seed();
  if (options.max_side() > 0) {
    manifest.max_side = options.max_side();
    manifest.jpeg_quality = options.jpeg_quality();
  }
  manifest.shards.resize(shards);

  std::mutex mutex;  // over `done` and the progress callback
  int64_t done = 0;
  parallel_for(shards, options.threads(), [&](size_t s) {
    const std::string name = options.prefix() + "-" + zero_padded(static_cast<int64_t>(s), 6);
    const fs::path tar = fs::path(out_dir) / (name + ".tar"), idx = fs::path(out_dir) / (name + ".idx");
    const int64_t samples = plan.first[s + 1] - plan.first[s];
    auto kept = kept_shard(tar, idx, samples, plan.bytes[s]);
    manifest.shards[s] = kept ? *kept : write_shard(images, plan, s, tar, idx, options);
    std::lock_guard<std::mutex> lock(mutex);
    done += samples;
    if (options.progress()) options.progress()(done, static_cast<int64_t>(images.size()));
  });
  const std::string text = format_manifest(manifest);
  write_file_atomically(fs::path(out_dir) / "manifest.json",
                        [&](const ByteWriter& write) { write(text.data(), text.size()); });
  return manifest;
}

}  // namespace dpt::data
