#include "dptrain/common/read_file.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>

namespace dpt {

namespace {

// Closes the file on every way out, keeping the errno of the failure being reported.
class Descriptor {
 public:
  explicit Descriptor(int fd) : fd_(fd) {}
  ~Descriptor() {
    const int reported = errno;
    ::close(fd_);
    errno = reported;
  }
  Descriptor(const Descriptor&) = delete;
  Descriptor& operator=(const Descriptor&) = delete;
  int get() const { return fd_; }

 private:
  int fd_;
};

}  // namespace

template <class Bytes>
std::optional<Bytes> read_file(const std::string& path) {
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) return std::nullopt;
  const Descriptor file(fd);
  // A regular file is read into a buffer one byte larger than it, so that the read which finds
  // its end needs no growth; /proc's files say 0, and their buffer doubles as it fills.
  struct stat status {};
  const bool sized = ::fstat(fd, &status) == 0 && status.st_size > 0;
  Bytes bytes;
  bytes.resize(sized ? static_cast<size_t>(status.st_size) + 1 : 4096);
  size_t size = 0;
  while (true) {
    if (size == bytes.size()) bytes.resize(2 * bytes.size());
    const ssize_t got = ::read(file.get(), bytes.data() + size, bytes.size() - size);
    if (got < 0 && errno == EINTR) continue;
    if (got < 0) return std::nullopt;
    if (got == 0) break;
    size += static_cast<size_t>(got);
  }
  bytes.resize(size);
  return bytes;
}

template std::optional<std::string> read_file(const std::string&);
template std::optional<std::vector<char>> read_file(const std::string&);
template std::optional<std::vector<uint8_t>> read_file(const std::string&);

}  // namespace dpt
