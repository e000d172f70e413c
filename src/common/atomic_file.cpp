#include "dptrain/common/atomic_file.h"

#include <fcntl.h>
#include <signal.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <fstream>
#include <regex>
#include <string>
#include <utility>

#include "dptrain/common/error.h"

namespace dpt {
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
  write_file_atomically(to, [&](const ByteWriter& write) {
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

}  // namespace dpt
