#pragma once
// The whole of a file as bytes, for tests that check what a writer left on disk.
//
//   EXPECT_EQ(dpt::testing::file_contents(dir / "metrics.jsonl"), expected);

#include <filesystem>
#include <fstream>
#include <iterator>
#include <string>

namespace dpt::testing {

inline std::string file_contents(const std::filesystem::path& file) {
  std::ifstream in(file, std::ios::binary);
  return std::string(std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>());
}

}  // namespace dpt::testing
