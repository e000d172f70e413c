#include "dptrain/data/shard_cache.h"

#include <fcntl.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <optional>
#include <vector>

#include "dptrain/common/error.h"
#include "dptrain/common/sha256.h"
#include "dptrain/common/text.h"

namespace dpt::data {

namespace fs = std::filesystem;

namespace {

constexpr const char* kLockSuffix = ".lock";
constexpr const char* kReservationSuffix = ".reserved";

// An exclusive flock on a file of the cache folder, released when it goes. flock locks an open
// file description, so two threads of one process exclude each other as two processes do.
class FolderLock {
 public:
  explicit FolderLock(const std::string& path) : fd_(::open(path.c_str(), O_RDWR | O_CREAT | O_CLOEXEC, 0644)) {
    DPT_CHECK(fd_ >= 0, DataError, "cannot open the shard cache's lock ", path, ": ", std::strerror(errno),
              "; give a cache folder this process may write (--data-cache)");
    while (::flock(fd_, LOCK_EX) != 0) {
      DPT_CHECK(errno == EINTR, DataError, "cannot lock ", path, ": ", std::strerror(errno));
    }
  }
  ~FolderLock() { ::close(fd_); }
  FolderLock(const FolderLock&) = delete;
  FolderLock& operator=(const FolderLock&) = delete;

 private:
  int fd_;
};

// The room a fetch under way takes in the folder: a file of the shard's size (sparse: no disk is
// used) that make_room counts and never evicts, removed when the fetch ends either way. Without
// it, two processes fetching at once would each make room for their own shard only.
class Reservation {
 public:
  Reservation(std::string path, int64_t bytes) : path_(std::move(path)) {
    const int fd = ::open(path_.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
    DPT_CHECK(fd >= 0 && ::ftruncate(fd, bytes) == 0, DataError, "cannot reserve room in the shard cache (",
              path_, "): ", std::strerror(errno), "; give a cache folder this process may write (--data-cache)");
    ::close(fd);
  }
  ~Reservation() { ::unlink(path_.c_str()); }
  Reservation(const Reservation&) = delete;
  Reservation& operator=(const Reservation&) = delete;

 private:
  std::string path_;
};

// Whether a fetch of the shard at `shard_path` is under way: its fetcher holds the shard's lock.
bool fetch_under_way(const std::string& shard_path) {
  const int fd = ::open((shard_path + kLockSuffix).c_str(), O_RDWR | O_CLOEXEC);
  if (fd < 0) return false;
  const bool held = ::flock(fd, LOCK_EX | LOCK_NB) != 0;
  ::close(fd);
  return held;
}

// The shard a fetch's room (<shard>.reserved) or partial file (<shard>.part.<pid>.<n>) is for.
std::string shard_of_leftover(const std::string& path) {
  if (ends_with(path, kReservationSuffix)) return path.substr(0, path.size() - std::strlen(kReservationSuffix));
  return path.substr(0, path.rfind(".part."));
}

bool has_size(const std::string& path, int64_t bytes) {
  struct stat st {};
  return ::stat(path.c_str(), &st) == 0 && (bytes < 0 || st.st_size == bytes);
}

}  // namespace

std::string default_shard_cache_folder() {
  if (const char* xdg = std::getenv("XDG_CACHE_HOME"); xdg != nullptr && *xdg != '\0') {
    return (fs::path(xdg) / "dptrain" / "shards").string();
  }
  if (const char* home = std::getenv("HOME"); home != nullptr && *home != '\0') {
    return (fs::path(home) / ".cache" / "dptrain" / "shards").string();
  }
  return "/tmp/dptrain-shards-" + std::to_string(::getuid());
}

ShardCache::ShardCache(ShardCacheOptions options) : options_(std::move(options)), store_(options_.remote()) {
  if (options_.folder().empty()) options_.folder(default_shard_cache_folder());
  DPT_CHECK(options_.max_bytes() > 0, ConfigError, "the shard cache's size must be positive, got ",
            options_.max_bytes(), " bytes");
  DPT_CHECK(options_.fetch_streams() >= 1, ConfigError, "the shard cache fetches with at least one stream, got ",
            options_.fetch_streams());
  std::error_code error;
  fs::create_directories(options_.folder(), error);
  DPT_CHECK(!error, DataError, "cannot create the shard cache folder ", options_.folder(), ": ", error.message(),
            "; give another (--data-cache)");
}

std::string ShardCache::path_of(const std::string& url) const {
  // The URL's hash keeps two sets' train-000000.tar apart; the name keeps the folder readable.
  const std::string name = url.substr(url.find_last_of('/') + 1);
  return (fs::path(options_.folder()) / (hex(sha256(url)).substr(0, 16) + "-" + name)).string();
}

bool ShardCache::holds(const std::string& url, int64_t bytes) const { return has_size(path_of(url), bytes); }

std::string ShardCache::local(const std::string& url, int64_t bytes) const {
  const std::string path = path_of(url);
  if (has_size(path, bytes)) {
    ::utimensat(AT_FDCWD, path.c_str(), nullptr, 0);  // read now: the last to be evicted
    return path;
  }
  DPT_CHECK(bytes <= options_.max_bytes(), ConfigError, "shard ", url, " has ", bytes, " bytes, more than the cache's ",
            options_.max_bytes(), ": give a larger --data-cache-size");
  const FolderLock one_fetch(path + kLockSuffix);
  if (has_size(path, bytes)) return path;  // another process or thread fetched it meanwhile
  std::optional<Reservation> reserved;
  {
    const FolderLock room(options_.folder() + "/.room" + kLockSuffix);
    make_room(std::max<int64_t>(bytes, 0), path);
    reserved.emplace(path + kReservationSuffix, std::max<int64_t>(bytes, 0));
  }
  const int64_t fetched = store_.fetch_to_file(url, path);
  if (bytes >= 0 && fetched != bytes) {
    std::error_code ignored;
    fs::remove(path, ignored);
    throw DataError(str("shard ", url, " came with ", fetched, " bytes and its manifest says ", bytes,
                        ": the remote copy differs from the one the manifest describes; write the set again"));
  }
  return path;
}

void ShardCache::make_room(int64_t bytes, const std::string& keep) const {
  struct Entry {
    fs::file_time_type used;
    int64_t size;
    fs::path path;
  };
  std::vector<Entry> entries;
  int64_t total = 0;
  std::error_code error;
  for (const auto& entry : fs::directory_iterator(options_.folder(), error)) {
    const std::string name = entry.path().filename().string();
    if (!entry.is_regular_file(error) || name.front() == '.' || ends_with(name, kLockSuffix) || entry.path() == keep) {
      continue;
    }
    const bool partial = name.find(".part.") != std::string::npos;
    const bool reservation = ends_with(name, kReservationSuffix);
    if (partial || reservation) {
      // A fetch's room and partial file are that fetch's to remove; a process killed mid-fetch
      // leaves them behind, and its room would count against the bound for good.
      if (!fetch_under_way(shard_of_leftover(entry.path().string()))) {
        fs::remove(entry.path(), error);
        continue;
      }
      if (partial) continue;  // its room is counted by the reservation
    }
    const auto size = static_cast<int64_t>(entry.file_size(error));
    total += size;
    // Another fetch's room counts, and stays.
    if (!reservation) entries.push_back({entry.last_write_time(error), size, entry.path()});
  }
  std::sort(entries.begin(), entries.end(), [](const Entry& a, const Entry& b) { return a.used < b.used; });
  for (const Entry& entry : entries) {
    if (total + bytes <= options_.max_bytes()) break;
    if (fs::remove(entry.path, error)) total -= entry.size;
  }
}

}  // namespace dpt::data
