#include "dptrain/data/shard_writer.h"

#include <atomic>
#include <cerrno>
#include <cstring>
#include <exception>
#include <filesystem>
#include <mutex>
#include <optional>
#include <thread>

#include "dptrain/common/atomic_file.h"
#include "dptrain/common/error.h"
#include "dptrain/common/read_file.h"
#include "dptrain/common/sha256.h"
#include "dptrain/common/text.h"
#include "dptrain/data/image.h"
#include "dptrain/data/sampler.h"
#include "dptrain/data/shard_index.h"
#include "dptrain/data/tar_archive.h"

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

Plan plan_shards(const std::vector<SourceImage>& images, const ShardWriterOptions& options) {
  Plan plan;
  const auto n = static_cast<int64_t>(images.size());
  if (options.order() == "shuffled") {
    plan.order = seeded_permutation(n, options.seed());
  } else {
    for (int64_t i = 0; i < n; ++i) plan.order.push_back(i);
  }
  plan.first.push_back(0);
  int64_t shard_size = 2 * kBlock;  // the end blocks
  for (int64_t k = 0; k < n; ++k) {
    std::error_code error;
    const std::string& path = images[plan.order[k]].path;
    const auto size = fs::file_size(path, error);
    DPT_CHECK(!error, DataError, "cannot read image ", path, ": ", error.message());
    const int64_t sample = tar_bytes(static_cast<int64_t>(size));
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
                      const fs::path& idx_path) {
  std::string tar_bytes;
  tar_bytes.reserve(static_cast<size_t>(plan.bytes[s]));
  TarWriter tar([&](const char* data, size_t size) { tar_bytes.append(data, size); });
  ShardIndex index;
  for (int64_t k = plan.first[s]; k < plan.first[s + 1]; ++k) {
    const SourceImage& image = images[plan.order[k]];
    const auto bytes = dpt::read_file<std::vector<uint8_t>>(image.path);
    DPT_CHECK(bytes, DataError, "cannot read image ", image.path, ": ", std::strerror(errno));
    const ImageFormat format = sniff_format(*bytes);
    DPT_CHECK(format != ImageFormat::Unknown, DataError, "image ", image.path,
              " is neither JPEG nor PNG; convert it, or leave it out of the source");
    const std::string extension = format == ImageFormat::Jpeg ? "jpg" : "png";
    const std::string key = key_of(k);
    index.samples.push_back({key, extension, tar.size() + kBlock, static_cast<int64_t>(bytes->size()), image.label});
    tar.add(key + "." + extension, reinterpret_cast<const char*>(bytes->data()), bytes->size());
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
  manifest.shards.resize(shards);

  std::atomic<size_t> next{0};
  std::mutex mutex;  // over `done`, the progress callback and the first failure
  int64_t done = 0;
  std::exception_ptr failure;
  auto work = [&] {
    for (size_t s = next++; s < shards; s = next++) {
      const std::string name = options.prefix() + "-" + zero_padded(static_cast<int64_t>(s), 6);
      const fs::path tar = fs::path(out_dir) / (name + ".tar"), idx = fs::path(out_dir) / (name + ".idx");
      const int64_t samples = plan.first[s + 1] - plan.first[s];
      try {
        auto kept = kept_shard(tar, idx, samples, plan.bytes[s]);
        manifest.shards[s] = kept ? *kept : write_shard(images, plan, s, tar, idx);
      } catch (...) {
        std::lock_guard<std::mutex> lock(mutex);
        if (!failure) failure = std::current_exception();
        next = shards;  // the others stop after their current shard
        return;
      }
      std::lock_guard<std::mutex> lock(mutex);
      done += samples;
      if (options.progress()) options.progress()(done, static_cast<int64_t>(images.size()));
    }
  };
  std::vector<std::thread> threads;
  for (int t = 1; t < std::min<int>(options.threads(), static_cast<int>(shards)); ++t) threads.emplace_back(work);
  work();
  for (auto& thread : threads) thread.join();
  if (failure) std::rethrow_exception(failure);
  const std::string text = format_manifest(manifest);
  write_file_atomically(fs::path(out_dir) / "manifest.json",
                        [&](const ByteWriter& write) { write(text.data(), text.size()); });
  return manifest;
}

}  // namespace dpt::data
