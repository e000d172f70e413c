#include "dptrain/data/shard_set.h"

#include <fcntl.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <filesystem>
#include <optional>

#include "dptrain/common/error.h"
#include "dptrain/common/read_file.h"
#include "dptrain/common/text.h"
#include "dptrain/data/shard_manifest.h"
#include "dptrain/data/tar_archive.h"

namespace dpt::data {

namespace fs = std::filesystem;

namespace {

constexpr const char* kManifestName = "manifest.json";
constexpr int64_t kMaxBraceNames = 10'000'000;

bool ends_with(const std::string& text, const std::string& end) {
  return text.size() >= end.size() && text.compare(text.size() - end.size(), end.size(), end) == 0;
}

// A file open for positioned reads, closed when it goes.
class ReadOnlyFile {
 public:
  explicit ReadOnlyFile(const std::string& path) : fd_(::open(path.c_str(), O_RDONLY | O_CLOEXEC)) {
    DPT_CHECK(fd_ >= 0, DataError, "cannot open shard ", path, ": ", std::strerror(errno));
  }
  ~ReadOnlyFile() { ::close(fd_); }
  ReadOnlyFile(const ReadOnlyFile&) = delete;
  ReadOnlyFile& operator=(const ReadOnlyFile&) = delete;

  // Reads up to `size` bytes at `offset`; fewer only at the end of the file.
  int64_t read_at(int64_t offset, int64_t size, char* out, const std::string& path) const {
    int64_t done = 0;
    while (done < size) {
      const ssize_t n = ::pread(fd_, out + done, static_cast<size_t>(size - done), offset + done);
      if (n < 0 && errno == EINTR) continue;
      DPT_CHECK(n >= 0, DataError, "cannot read shard ", path, " at byte ", offset + done, ": ", std::strerror(errno));
      if (n == 0) break;
      done += n;
    }
    return done;
  }

 private:
  int fd_;
};

// The set's shard files and, when it has one, its manifest.
struct Resolved {
  std::vector<std::string> paths;
  std::optional<ShardManifest> manifest;
};

Resolved read_manifest(const fs::path& path) {
  const auto text = dpt::read_file<std::string>(path.string());
  DPT_CHECK(text, DataError, "cannot read manifest ", path.string(), ": ", std::strerror(errno));
  Resolved resolved;
  resolved.manifest = parse_manifest(*text, path.string());
  for (const auto& shard : resolved.manifest->shards) {
    resolved.paths.push_back((path.parent_path() / shard.file).string());
  }
  return resolved;
}

Resolved resolve(const std::string& spec) {
  if (spec.find('{') != std::string::npos) return {expand_braces(spec), std::nullopt};
  const fs::path path(spec);
  std::error_code error;
  if (fs::is_directory(path, error)) {
    if (fs::exists(path / kManifestName)) return read_manifest(path / kManifestName);
    Resolved resolved;
    for (const auto& entry : fs::directory_iterator(path)) {
      if (entry.is_regular_file() && entry.path().extension() == ".tar") {
        resolved.paths.push_back(entry.path().string());
      }
    }
    std::sort(resolved.paths.begin(), resolved.paths.end());
    DPT_CHECK(!resolved.paths.empty(), DataError, "folder ", spec, " holds neither a ", kManifestName,
              " nor .tar shards");
    return resolved;
  }
  if (ends_with(spec, ".json")) return read_manifest(path);
  return {{spec}, std::nullopt};
}

// The index beside a shard (`x.tar` -> `x.idx`) when it describes the shard as it is now, else one
// from a scan of the shard's headers.
ShardIndex load_index(const std::string& path, int64_t archive_size, const ReadOnlyFile& file, BadImagePolicy policy) {
  const fs::path index_path = fs::path(path).replace_extension(".idx");
  if (const auto text = dpt::read_file<std::string>(index_path.string())) {
    ShardIndex index = parse_shard_index(*text, index_path.string());
    if (index.archive_size == archive_size) return index;
  }
  const ReadAt read_at = [&](int64_t offset, int64_t size, char* out) { return file.read_at(offset, size, out, path); };
  return index_shard(scan_tar(read_at, archive_size, path), read_at, archive_size, path, policy);
}

}  // namespace

bool is_shard_set(const std::string& path) {
  if (path.find('{') != std::string::npos || ends_with(path, ".tar") || ends_with(path, ".json")) return true;
  std::error_code error;
  if (!fs::is_directory(path, error)) return false;
  if (fs::exists(fs::path(path) / kManifestName, error)) return true;
  for (const auto& entry : fs::directory_iterator(path, error)) {
    if (entry.path().extension() == ".tar") return true;
  }
  return false;
}

std::vector<std::string> expand_braces(const std::string& pattern) {
  const size_t open = pattern.find('{');
  if (open == std::string::npos) {
    DPT_CHECK(pattern.find('}') == std::string::npos, ConfigError, "shard pattern has a '}' without its '{': ",
              pattern);
    return {pattern};
  }
  const size_t close = pattern.find('}', open);
  DPT_CHECK(close != std::string::npos, ConfigError, "shard pattern has a '{' without its '}': ", pattern);
  const std::string inside = pattern.substr(open + 1, close - open - 1);
  const std::string head = pattern.substr(0, open);
  std::vector<std::string> middles;
  const size_t dots = inside.find("..");
  if (dots != std::string::npos) {
    const std::string first = inside.substr(0, dots), last = inside.substr(dots + 2);
    const auto all_digits = [](const std::string& s) {
      const auto digit = [](char c) { return c >= '0' && c <= '9'; };
      return !s.empty() && s.size() <= 18 && std::all_of(s.begin(), s.end(), digit);
    };
    DPT_CHECK(all_digits(first) && all_digits(last), ConfigError, "shard pattern range {", inside,
              "} needs two numbers, as in {000000..000146}");
    const int64_t from = std::stoll(first), to = std::stoll(last);
    DPT_CHECK(from <= to && to - from < kMaxBraceNames, ConfigError, "shard pattern range {", inside,
              "} must go upwards and name at most ", kMaxBraceNames, " shards");
    for (int64_t i = from; i <= to; ++i) {
      middles.push_back(zero_padded(i, first.size()));
    }
  } else {
    DPT_CHECK(!inside.empty(), ConfigError, "shard pattern has an empty {}: ", pattern);
    for (size_t at = 0;;) {
      const size_t comma = inside.find(',', at);
      middles.push_back(inside.substr(at, comma - at));
      if (comma == std::string::npos) break;
      at = comma + 1;
    }
  }
  // The first brace varies slowest, as the shell expands them.
  const std::vector<std::string> tails = expand_braces(pattern.substr(close + 1));
  std::vector<std::string> names;
  names.reserve(middles.size() * tails.size());
  for (const std::string& middle : middles) {
    for (const std::string& tail : tails) names.push_back(head + middle + tail);
  }
  return names;
}

ShardSet::ShardSet(const std::string& spec, Transform transform, BadImagePolicy policy)
    : transform_(std::move(transform)) {
  Resolved resolved = resolve(spec);
  paths_ = std::move(resolved.paths);
  starts_.push_back(0);
  int64_t largest_label = -1;
  for (size_t s = 0; s < paths_.size(); ++s) {
    const std::string& path = paths_[s];
    std::error_code error;
    const auto bytes = fs::file_size(path, error);
    DPT_CHECK(!error, DataError, "shard ", path, " cannot be read: ", error.message(),
              resolved.manifest ? " (the manifest lists it: write the set again, make-shards resumes)" : "");
    const auto archive_size = static_cast<int64_t>(bytes);
    if (resolved.manifest) {
      const ShardFile& listed = resolved.manifest->shards[s];
      DPT_CHECK(listed.bytes == archive_size, DataError, "shard ", path, " has ", archive_size,
                " bytes and the manifest says ", listed.bytes, ": it was cut short or replaced; copy it again");
    }
    const ReadOnlyFile file(path);
    indices_.push_back(load_index(path, archive_size, file, policy));
    const ShardIndex& index = indices_.back();
    if (resolved.manifest) {
      DPT_CHECK(static_cast<int64_t>(index.samples.size()) == resolved.manifest->shards[s].samples, DataError,
                "shard ", path, " holds ", index.samples.size(), " samples and the manifest says ",
                resolved.manifest->shards[s].samples);
    }
    for (const auto& sample : index.samples) largest_label = std::max(largest_label, sample.label);
    warnings_.insert(warnings_.end(), index.skipped.begin(), index.skipped.end());
    starts_.push_back(starts_.back() + static_cast<int64_t>(index.samples.size()));
  }
  DPT_CHECK(starts_.back() > 0, DataError, "shard set ", spec, " holds no samples");
  if (resolved.manifest) {
    classes_ = resolved.manifest->classes;
    DPT_CHECK(largest_label < num_classes(), DataError, "shard set ", spec, " has a sample of class ", largest_label,
              " but its manifest names ", num_classes(), " classes");
  } else {
    for (int64_t c = 0; c <= largest_label; ++c) classes_.push_back(std::to_string(c));
  }
}

std::pair<size_t, size_t> ShardSet::locate(int64_t index) const {
  check_index(index);
  const auto shard = static_cast<size_t>(std::upper_bound(starts_.begin(), starts_.end(), index) - starts_.begin() - 1);
  return {shard, static_cast<size_t>(index - starts_[shard])};
}

int64_t ShardSet::label(int64_t index) const {
  const auto [shard, sample] = locate(index);
  return indices_[shard].samples[sample].label;
}

std::vector<uint8_t> ShardSet::image_bytes(int64_t index) const {
  const auto [shard, sample] = locate(index);
  const ShardSample& s = indices_[shard].samples[sample];
  std::vector<uint8_t> bytes(static_cast<size_t>(s.size));
  const ReadOnlyFile file(paths_[shard]);
  DPT_CHECK(file.read_at(s.offset, s.size, reinterpret_cast<char*>(bytes.data()), paths_[shard]) == s.size, DataError,
            "shard ", paths_[shard], " ends inside member ", s.key, ".", s.image, ": it changed after it was indexed");
  return bytes;
}

int64_t ShardSet::get(int64_t index, int64_t epoch, float* out) const {
  transform_.apply_encoded(image_bytes(index), describe(index), epoch, index, out);
  return label(index);
}

std::string ShardSet::describe(int64_t index) const {
  const auto [shard, sample] = locate(index);
  const ShardSample& s = indices_[shard].samples[sample];
  return paths_[shard] + "#" + s.key + "." + s.image;
}

std::vector<int64_t> ShardSet::shard_sizes() const {
  std::vector<int64_t> sizes;
  for (const auto& index : indices_) sizes.push_back(static_cast<int64_t>(index.samples.size()));
  return sizes;
}

}  // namespace dpt::data
