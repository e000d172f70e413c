#pragma once
// A folder in /dev/shm for the files a fuzz target hands the code under test, one per fuzzing
// process, emptied for each input and removed when the process exits.
//
//   static const ScratchDir scratch("report");
//   const auto dir = scratch.fresh();

#include <unistd.h>

#include <filesystem>
#include <string>

class ScratchDir {
 public:
  explicit ScratchDir(const std::string& target)
      : path_(std::filesystem::path("/dev/shm") / ("dptrain-fuzz-" + target + "-" + std::to_string(::getpid()))) {}
  ~ScratchDir() {
    std::error_code ignored;
    std::filesystem::remove_all(path_, ignored);
  }
  ScratchDir(const ScratchDir&) = delete;
  ScratchDir& operator=(const ScratchDir&) = delete;

  // The folder, empty.
  const std::filesystem::path& fresh() const {
    std::error_code ignored;
    std::filesystem::remove_all(path_, ignored);
    std::filesystem::create_directories(path_);
    return path_;
  }

 private:
  std::filesystem::path path_;
};
