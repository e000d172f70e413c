#pragma once
// What the log writers share: a file that a failing disk cannot turn into a failed training run,
// and the wall clock their records are stamped with.
//
//   dpt::train::LogFile log = dpt::train::LogFile::append(dir / "metrics.jsonl");
//   log.write("{\"loss\":1.25}\n");   // one write(2): readers (tail -f) see whole lines at once
//
// Opening reports problems by throwing ConfigError, before training starts. Writing never throws:
// the first failure (disk full, file system gone) is reported once on stderr, naming the file and
// the reason, and later writes are dropped, so that training goes on without this log.

#include <filesystem>
#include <functional>
#include <optional>
#include <string>
#include <string_view>

namespace dpt::train {

// Seconds since the Unix epoch, with sub-second precision.
double unix_time();

// Where writers read the time from; tests pass a fixed one.
using WallClock = std::function<double()>;

class LogFile {
 public:
  // Opens `path` for appending, creating it when missing: a resumed run continues the same log.
  static LogFile append(const std::filesystem::path& path);
  // The same, creating its folder first: for a log whose path a flag gives (`what` is the log's
  // name in the error, `flag` the flag to check).
  static LogFile append_creating_folder(const std::filesystem::path& path, const std::string& what,
                                        const std::string& flag);
  // Creates `path`, which must not exist yet; std::nullopt when it does.
  static std::optional<LogFile> create_new(const std::filesystem::path& path);

  ~LogFile();
  LogFile(LogFile&& other) noexcept;
  LogFile& operator=(LogFile&& other) noexcept;
  LogFile(const LogFile&) = delete;
  LogFile& operator=(const LogFile&) = delete;

  // Appends `bytes` with as few write(2) calls as the kernel allows (one, for what logs write).
  void write(std::string_view bytes);
  // False once a write has failed; nothing is written after that.
  bool ok() const { return fd_ >= 0; }
  const std::filesystem::path& path() const { return path_; }

 private:
  LogFile(std::filesystem::path path, int fd) : path_(std::move(path)), fd_(fd) {}
  void close();

  std::filesystem::path path_;
  int fd_ = -1;
};

}  // namespace dpt::train
