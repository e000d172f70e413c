#include "dptrain/data/shard_set.h"

#include <fcntl.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <filesystem>
#include <mutex>

#include "dptrain/common/error.h"
#include "dptrain/common/parallel_for.h"
#include "dptrain/common/read_file.h"
#include "dptrain/data/tar_archive.h"
#include "shard_prefetcher.h"
#include "shard_sources.h"

namespace dpt::data {

namespace fs = std::filesystem;

namespace {

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

// Shards whose indexes are read at once when a set opens.
constexpr int kIndexReaders = 16;

// The index of the shard `name` from a scan of its bytes at `path`.
ShardIndex scan_shard(const std::string& path, int64_t archive_size, const std::string& name, BadImagePolicy policy) {
  const ReadOnlyFile file(path);
  const ReadAt read_at = [&](int64_t offset, int64_t size, char* out) { return file.read_at(offset, size, out, name); };
  return index_shard(scan_tar(read_at, archive_size, name), read_at, archive_size, name, policy);
}

// `text`'s index when it describes a shard of `archive_size` bytes (any, when negative).
std::optional<ShardIndex> usable_index(const std::optional<std::string>& text, const std::string& name,
                                       int64_t archive_size) {
  if (!text) return std::nullopt;
  ShardIndex index = parse_shard_index(*text, name);
  if (archive_size >= 0 && index.archive_size != archive_size) return std::nullopt;
  return index;
}

int64_t local_size(const std::string& path, bool listed) {
  std::error_code error;
  const auto bytes = fs::file_size(path, error);
  DPT_CHECK(!error, DataError, "shard ", path, " cannot be read: ", error.message(),
            listed ? " (the manifest lists it: write the set again, make-shards resumes)" : "");
  return static_cast<int64_t>(bytes);
}

}  // namespace

ShardSet::ShardSet(const std::string& spec, Transform transform, BadImagePolicy policy,
                   std::optional<ShardCacheOptions> cache)
    : transform_(std::move(transform)) {
  // A remote set is opened through its cache's store, the one that fetches its shards: the S3
  // settings (a credential process's key, say) are found once.
  ShardSources sources;
  if (is_remote(spec)) {
    cache_ = std::make_unique<ShardCache>(cache.value_or(ShardCacheOptions()));
    sources = resolve_remote_shards(spec, cache_->store());
  } else {
    sources = resolve_local_shards(spec);
  }
  const auto& manifest = sources.manifest;
  paths_ = std::move(sources.names);
  // Each shard's index, read (or built by a scan) on several threads: a remote set's indexes are
  // a round trip each, a thousand of them for ImageNet. Each is packed at once, so that only the
  // indexes being read are ever held whole.
  struct Opened {
    PackedShardIndex index;
    int64_t archive_size;
    int64_t largest_label;
    std::vector<std::string> skipped;
  };
  std::vector<std::optional<Opened>> opened(paths_.size());
  // A remote shard without an index is fetched whole to be scanned: one at a time, after the
  // others, so that the fetches do not hold more of the cache at once than the loader would.
  std::vector<size_t> to_fetch;
  std::mutex to_fetch_mutex;
  auto open = [&](size_t s, bool may_fetch) {
    const std::string& name = paths_[s];
    const int64_t listed = manifest ? manifest->shards[s].bytes : -1;
    std::optional<ShardIndex> index;
    if (cache_) {
      const std::string index_url = index_name_of(name);
      if (!may_fetch) index = usable_index(cache_->store().fetch_text_if_present(index_url), index_url, listed);
      if (!index && !may_fetch) {
        std::lock_guard<std::mutex> lock(to_fetch_mutex);
        to_fetch.push_back(s);
        return;
      }
      if (!index) index = scan_shard(cache_->local(name, listed), listed >= 0 ? listed : 0, name, policy);
    } else {
      const int64_t bytes = local_size(name, manifest.has_value());
      DPT_CHECK(listed < 0 || listed == bytes, DataError, "shard ", name, " has ", bytes,
                " bytes and the manifest says ", listed, ": it was cut short or replaced; copy it again");
      index = usable_index(dpt::read_file<std::string>(index_name_of(name)), index_name_of(name), bytes);
      if (!index) index = scan_shard(name, bytes, name, policy);
    }
    if (manifest) {
      DPT_CHECK(static_cast<int64_t>(index->samples.size()) == manifest->shards[s].samples, DataError, "shard ", name,
                " holds ", index->samples.size(), " samples and the manifest says ", manifest->shards[s].samples);
    }
    int64_t largest_label = -1;
    for (const auto& sample : index->samples) largest_label = std::max(largest_label, sample.label);
    opened[s] = Opened{PackedShardIndex(*index, name), index->archive_size, largest_label, std::move(index->skipped)};
  };
  parallel_for(paths_.size(), kIndexReaders, [&](size_t s) { open(s, false); });
  std::sort(to_fetch.begin(), to_fetch.end());
  for (size_t s : to_fetch) open(s, true);
  starts_.push_back(0);
  int64_t largest_label = -1;
  for (auto& shard : opened) {
    largest_label = std::max(largest_label, shard->largest_label);
    warnings_.insert(warnings_.end(), shard->skipped.begin(), shard->skipped.end());
    starts_.push_back(starts_.back() + static_cast<int64_t>(shard->index.size()));
    archive_sizes_.push_back(shard->archive_size);
    indices_.push_back(std::move(shard->index));
  }
  DPT_CHECK(starts_.back() > 0, DataError, "shard set ", spec, " holds no samples");
  if (manifest) {
    classes_ = manifest->classes;
    DPT_CHECK(largest_label < num_classes(), DataError, "shard set ", spec, " has a sample of class ", largest_label,
              " but its manifest names ", num_classes(), " classes");
  } else {
    for (int64_t c = 0; c <= largest_label; ++c) classes_.push_back(std::to_string(c));
  }
}

ShardSet::~ShardSet() = default;

std::pair<size_t, size_t> ShardSet::locate(int64_t index) const {
  check_index(index);
  const auto shard = static_cast<size_t>(std::upper_bound(starts_.begin(), starts_.end(), index) - starts_.begin() - 1);
  return {shard, static_cast<size_t>(index - starts_[shard])};
}

int64_t ShardSet::label(int64_t index) const {
  const auto [shard, sample] = locate(index);
  return indices_[shard].label(sample);
}

std::string ShardSet::readable_path(size_t shard) const {
  if (!cache_) return paths_[shard];
  {
    std::lock_guard<std::mutex> lock(prefetch_mutex_);
    if (prefetcher_) prefetcher_->reading(shard);
  }
  return cache_->local(paths_[shard], archive_sizes_[shard]);
}

std::vector<uint8_t> ShardSet::image_bytes(int64_t index) const {
  const auto [shard, sample] = locate(index);
  return member_bytes(shard, sample);
}

std::vector<uint8_t> ShardSet::member_bytes(size_t shard, size_t sample) const {
  const PackedShardIndex& index = indices_[shard];
  std::vector<uint8_t> bytes(static_cast<size_t>(index.bytes(sample)));
  auto read = [&] {
    const ReadOnlyFile file(readable_path(shard));
    return file.read_at(index.offset(sample), index.bytes(sample), reinterpret_cast<char*>(bytes.data()),
                        paths_[shard]);
  };
  int64_t got = 0;
  try {
    got = read();
  } catch (const DataError&) {
    if (!cache_) throw;
    got = read();  // the cache may have let the shard go between finding and opening it
  }
  DPT_CHECK(got == index.bytes(sample), DataError, "shard ", paths_[shard], " ends inside member ",
            index.member(sample), ": it changed after it was indexed");
  return bytes;
}

int64_t ShardSet::get(int64_t index, int64_t epoch, float* out) const {
  const auto [shard, sample] = locate(index);
  transform_.apply_encoded(member_bytes(shard, sample), member_name(shard, sample), epoch, index, out);
  return indices_[shard].label(sample);
}

std::string ShardSet::describe(int64_t index) const {
  const auto [shard, sample] = locate(index);
  return member_name(shard, sample);
}

std::string ShardSet::member_name(size_t shard, size_t sample) const {
  return str(paths_[shard], "#", indices_[shard].member(sample));
}

std::vector<size_t> ShardSet::shard_order(const std::vector<int64_t>& indices) const {
  std::vector<size_t> order;
  std::vector<bool> seen(paths_.size(), false);
  for (int64_t draw : indices) {
    const size_t shard = locate(draw % size()).first;
    if (!seen[shard]) {
      seen[shard] = true;
      order.push_back(shard);
    }
  }
  return order;
}

void ShardSet::will_read(int64_t epoch, const std::vector<int64_t>& indices) const {
  if (!cache_) return;
  std::vector<size_t> order = shard_order(indices);
  std::lock_guard<std::mutex> lock(prefetch_mutex_);
  // An epoch said again or before the last: a new loader, whose epochs replace the old one's.
  said_.erase(said_.lower_bound(epoch), said_.end());
  if (prefetcher_ && epoch == reading_epoch_ + 1) prefetcher_->then(order);
  said_.emplace(epoch, std::move(order));
}

void ShardSet::starts_reading(int64_t epoch) const {
  if (!cache_) return;
  // The epoch before's prefetcher stops once the lock is released (declared before it): it may
  // be fetching one of this epoch's shards, which the readers of its own last batches need not
  // wait for.
  std::unique_ptr<ShardPrefetcher> done;
  std::lock_guard<std::mutex> lock(prefetch_mutex_);
  const auto found = said_.find(epoch);
  if (found == said_.end()) return;
  done = std::move(prefetcher_);
  prefetcher_ = std::make_unique<ShardPrefetcher>(*cache_, paths_, archive_sizes_, std::move(found->second),
                                                  cache_->options().max_bytes() / 2);
  reading_epoch_ = epoch;
  said_.erase(said_.begin(), std::next(found));
  if (!said_.empty() && said_.begin()->first == epoch + 1) prefetcher_->then(said_.begin()->second);
}

int64_t ShardSet::index_bytes() const {
  int64_t bytes = 0;
  for (const auto& index : indices_) bytes += index.bytes_held();
  return bytes;
}

std::vector<int64_t> ShardSet::shard_sizes() const {
  std::vector<int64_t> sizes;
  for (const auto& index : indices_) sizes.push_back(static_cast<int64_t>(index.size()));
  return sizes;
}

}  // namespace dpt::data
