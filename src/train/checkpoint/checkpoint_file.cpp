#include "dptrain/train/checkpoint/checkpoint_file.h"

#include <fcntl.h>
#include <signal.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <fstream>
#include <iterator>
#include <regex>
#include <string>
#include <utility>

#include <torch/serialize.h>

#include "dptrain/common/error.h"
#include "dptrain/compat/pickle.h"

namespace dpt::train {
namespace fs = std::filesystem;
namespace {

[[noreturn]] void fail(const std::string& operation, const fs::path& file, int error) {
  throw CheckpointError(str("cannot ", operation, " ", file.string(), ": ", std::strerror(error),
                            "; check that the folder exists, is writable and has free space"));
}

// Closes a descriptor on every path out, including errors.
class FileDescriptor {
 public:
  explicit FileDescriptor(int fd) : fd_(fd) {}
  ~FileDescriptor() {
    if (fd_ >= 0) ::close(fd_);
  }
  FileDescriptor(const FileDescriptor&) = delete;
  FileDescriptor& operator=(const FileDescriptor&) = delete;
  int get() const { return fd_; }
  // close() reports delayed write errors (NFS), so its result matters.
  int release_and_close() { return ::close(std::exchange(fd_, -1)); }

 private:
  int fd_;
};

void write_all(int fd, const char* bytes, size_t size, const fs::path& file) {
  size_t done = 0;
  while (done < size) {
    const ssize_t n = ::write(fd, bytes + done, size - done);
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) fail("write", file, errno);
    done += static_cast<size_t>(n);
  }
}

int64_t write_and_sync(const fs::path& file, const FileContents& contents) {
  FileDescriptor fd(::open(file.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644));
  if (fd.get() < 0) fail("create", file, errno);
  int64_t size = 0;
  contents([&](const char* bytes, size_t n) {
    write_all(fd.get(), bytes, n, file);
    size += static_cast<int64_t>(n);
  });
  if (::fsync(fd.get()) != 0) fail("flush to disk", file, errno);
  if (fd.release_and_close() != 0) fail("close", file, errno);
  return size;
}

// Makes the rename itself durable: the folder entry is what a crash would otherwise lose.
void sync_folder(const fs::path& folder) {
  FileDescriptor fd(::open(folder.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC));
  if (fd.get() < 0) fail("open the folder", folder, errno);
  if (::fsync(fd.get()) != 0) fail("flush the folder", folder, errno);
}

std::vector<char> read_all(const fs::path& path) {
  std::ifstream in(path, std::ios::binary);
  DPT_CHECK(in, CheckpointError, "cannot open checkpoint ", path.string(), ": ",
            std::strerror(errno), "; check the path (--resume) and its permissions");
  std::vector<char> bytes((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  DPT_CHECK(!in.bad(), CheckpointError, "cannot read checkpoint ", path.string(), ": ",
            std::strerror(errno));
  return bytes;
}

std::string first_line(const std::string& text) { return text.substr(0, text.find('\n')); }

fs::path folder_of(const fs::path& path) { return path.has_parent_path() ? path.parent_path() : fs::path("."); }

// Where a new version of `path` is made before it is renamed over it (remove_unfinished_writes
// knows the name).
fs::path temporary_for(const fs::path& path) { return fs::path(path.string() + ".tmp." + std::to_string(::getpid())); }

}  // namespace

int64_t write_file_atomically(const fs::path& path, const FileContents& contents) {
  const fs::path folder = folder_of(path);
  const fs::path temporary = temporary_for(path);
  int64_t size = 0;
  try {
    size = write_and_sync(temporary, contents);
    if (::rename(temporary.c_str(), path.c_str()) != 0) fail("rename the new file over", path, errno);
  } catch (...) {
    std::error_code ignored;  // the first error is the one to report
    if (fs::is_regular_file(temporary, ignored)) fs::remove(temporary, ignored);
    throw;
  }
  sync_folder(folder);
  return size;
}

void copy_file_atomically(const fs::path& from, const fs::path& to) {
  std::ifstream in(from, std::ios::binary);
  DPT_CHECK(in, CheckpointError, "cannot open ", from.string(), " to copy it to ", to.string(), ": ",
            std::strerror(errno));
  write_file_atomically(to, [&](const compat::ByteSink& write) {
    std::vector<char> chunk(size_t{4} << 20);
    while (in) {
      in.read(chunk.data(), static_cast<std::streamsize>(chunk.size()));
      if (in.gcount() > 0) write(chunk.data(), static_cast<size_t>(in.gcount()));
    }
    DPT_CHECK(!in.bad(), CheckpointError, "cannot read ", from.string(), " to copy it to ", to.string(), ": ",
              std::strerror(errno));
  });
}

void link_or_copy_file_atomically(const fs::path& from, const fs::path& to) {
  const fs::path temporary = temporary_for(to);
  ::unlink(temporary.c_str());  // what a killed process of the same pid left
  if (::link(from.c_str(), temporary.c_str()) != 0) return copy_file_atomically(from, to);
  const int renamed = ::rename(temporary.c_str(), to.c_str());
  const int rename_error = errno;
  // Where `to` already names the same file, rename does nothing and the temporary name stays.
  ::unlink(temporary.c_str());
  if (renamed != 0) fail("rename the new file over", to, rename_error);
  sync_folder(folder_of(to));
}

int64_t save_checkpoint(const c10::IValue& state, const fs::path& path) {
  return write_file_atomically(path, [&](const compat::ByteSink& write) { compat::pickle_save(state, write); });
}

c10::IValue load_checkpoint(const fs::path& path) {
  DPT_CHECK(fs::exists(path), CheckpointError, "checkpoint ", path.string(),
            " does not exist; check the path given to resume from");
  const std::vector<char> bytes = read_all(path);
  try {
    return compat::pickle_load(bytes);
  } catch (const std::exception& e) {
    throw CheckpointError(str(
        "checkpoint ", path.string(), " (", bytes.size(), " bytes) is truncated or corrupt: ",
        first_line(e.what()),
        "; it was not written by dptrain or was damaged after writing: resume from an older "
        "checkpoint_epoch<N>.pt in the same folder, or start without --resume"));
  }
}

fs::path epoch_checkpoint_path(const fs::path& dir, int64_t epoch) {
  return dir / ("checkpoint_epoch" + std::to_string(epoch) + ".pt");
}

std::vector<fs::path> epoch_checkpoints(const fs::path& dir) {
  static const std::regex kEpochFile(R"(checkpoint_epoch(\d+)\.pt)");
  std::vector<std::pair<int64_t, fs::path>> found;
  for (const auto& entry : fs::directory_iterator(dir)) {
    const std::string name = entry.path().filename().string();
    std::smatch match;
    if (entry.is_regular_file() && std::regex_match(name, match, kEpochFile)) {
      found.emplace_back(std::stoll(match[1].str()), entry.path());
    }
  }
  std::sort(found.begin(), found.end());
  std::vector<fs::path> files;
  for (auto& [epoch, file] : found) files.push_back(std::move(file));
  return files;
}

std::vector<fs::path> remove_unfinished_writes(const fs::path& dir) {
  static const std::regex kTemporary(R"(.+\.tmp\.(\d{1,9}))");
  std::vector<fs::path> deleted;
  std::error_code error;
  for (const auto& entry : fs::directory_iterator(dir, error)) {
    const std::string name = entry.path().filename().string();
    std::smatch match;
    if (!std::regex_match(name, match, kTemporary)) continue;
    const pid_t pid = static_cast<pid_t>(std::stoll(match[1].str()));
    const bool running = ::kill(pid, 0) == 0 || errno == EPERM;
    if (!running && fs::remove(entry.path(), error)) deleted.push_back(entry.path());
  }
  return deleted;
}

std::vector<fs::path> rotate_checkpoints(const fs::path& dir, int64_t keep_last) {
  DPT_CHECK(keep_last >= 1, ConfigError, "the number of checkpoints to keep must be at least 1, got ",
            keep_last);
  const auto found = epoch_checkpoints(dir);
  std::vector<fs::path> deleted;
  for (size_t i = 0; i + keep_last < found.size(); ++i) {
    std::error_code error;
    fs::remove(found[i], error);
    DPT_CHECK(!error, CheckpointError, "cannot delete old checkpoint ", found[i].string(), ": ", error.message(),
              "; check the folder's permissions");
    deleted.push_back(found[i]);
  }
  return deleted;
}

}  // namespace dpt::train
