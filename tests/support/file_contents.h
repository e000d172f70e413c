#pragma once
// The whole of a file as bytes, for tests that check what a writer left on disk.
//
//   EXPECT_EQ(dpt::testing::file_contents(dir / "metrics.jsonl"), expected);

#include <filesystem>
#include <string>

#include "dptrain/common/read_file.h"

namespace dpt::testing {

// Empty when the file cannot be read: the comparison that follows fails, naming the file's test.
inline std::string file_contents(const std::filesystem::path& file) {
  return dpt::read_file<std::string>(file).value_or("");
}

}  // namespace dpt::testing
