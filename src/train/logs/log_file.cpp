#include "dptrain/train/logs/log_file.h"

#include <fcntl.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <utility>

#include "dptrain/common/error.h"

namespace dpt::train {
namespace fs = std::filesystem;
namespace {

int open_or_throw(const fs::path& path, int flags) {
  const int fd = ::open(path.c_str(), flags | O_WRONLY | O_CLOEXEC, 0644);
  if (fd < 0 && !(errno == EEXIST && (flags & O_EXCL))) {
    throw ConfigError(str("cannot open log file ", path.string(), ": ", std::strerror(errno),
                          "; check that the output folder exists and is writable"));
  }
  return fd;
}

}  // namespace

double unix_time() {
  return std::chrono::duration<double>(std::chrono::system_clock::now().time_since_epoch()).count();
}

LogFile LogFile::append(const fs::path& path) {
  return LogFile(path, open_or_throw(path, O_CREAT | O_APPEND));
}

LogFile LogFile::append_creating_folder(const fs::path& path, const std::string& what, const std::string& flag) {
  std::error_code error;
  if (path.has_parent_path()) fs::create_directories(path.parent_path(), error);
  DPT_CHECK(!error, ConfigError, "cannot create the folder of the ", what, " ", path.string(), ": ", error.message(),
            "; check ", flag, "'s path and its permissions");
  return append(path);
}

std::optional<LogFile> LogFile::create_new(const fs::path& path) {
  const int fd = open_or_throw(path, O_CREAT | O_EXCL);
  if (fd < 0) return std::nullopt;
  return LogFile(path, fd);
}

LogFile::~LogFile() { close(); }

LogFile::LogFile(LogFile&& other) noexcept
    : path_(std::move(other.path_)), fd_(std::exchange(other.fd_, -1)) {}

LogFile& LogFile::operator=(LogFile&& other) noexcept {
  if (this != &other) {
    close();
    path_ = std::move(other.path_);
    fd_ = std::exchange(other.fd_, -1);
  }
  return *this;
}

void LogFile::close() {
  if (fd_ >= 0) ::close(std::exchange(fd_, -1));
}

void LogFile::write(std::string_view bytes) {
  while (fd_ >= 0 && !bytes.empty()) {
    const ssize_t n = ::write(fd_, bytes.data(), bytes.size());
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) {
      std::fprintf(stderr, "dptrain: cannot write log file %s: %s; training goes on without it\n",
                   path_.c_str(), std::strerror(errno));
      close();
      return;
    }
    bytes.remove_prefix(static_cast<size_t>(n));
  }
}

}  // namespace dpt::train
