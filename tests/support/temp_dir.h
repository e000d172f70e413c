#pragma once
// A fresh directory under /tmp for one test, removed with everything in it at scope exit.
//
//   dpt::testing::TempDir dir;
//   std::ofstream(dir.path() + "/a.txt") << "x";

#include <cstdlib>
#include <filesystem>
#include <string>

namespace dpt::testing {

class TempDir {
 public:
  TempDir() {
    char pattern[] = "/tmp/dptrain_test_XXXXXX";
    path_ = mkdtemp(pattern);
  }
  ~TempDir() {
    std::error_code ec;
    std::filesystem::remove_all(path_, ec);
  }
  TempDir(const TempDir&) = delete;
  TempDir& operator=(const TempDir&) = delete;
  const std::string& path() const { return path_; }

 private:
  std::string path_;
};

}  // namespace dpt::testing
