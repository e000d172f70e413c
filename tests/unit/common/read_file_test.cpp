#include "dptrain/common/read_file.h"

#include <gtest/gtest.h>
#include <unistd.h>

#include <cerrno>
#include <cstdint>
#include <cstring>
#include <fstream>
#include <string>
#include <vector>

#include "dptrain/common/text.h"
#include "support/temp_dir.h"

using namespace std::string_literals;

namespace {

// Every byte value, NULs among them, over a length that is no power of two.
std::string every_byte_value(size_t size) {
  std::string bytes(size, '\0');
  for (size_t i = 0; i < size; ++i) bytes[i] = static_cast<char>((i * 7 + 3) % 256);
  return bytes;
}

}  // namespace

TEST(ReadFile, GivesARegularFilesBytesInEachContainer) {
  dpt::testing::TempDir dir;
  const std::string path = dir.path() + "/bytes.bin";
  const std::string expected = every_byte_value(100003);
  std::ofstream(path, std::ios::binary) << expected;

  // Compared whole, not printed: a failure would print 100 kB.
  EXPECT_TRUE(dpt::read_file<std::string>(path) == expected);
  EXPECT_TRUE(dpt::read_file<std::vector<char>>(path) == std::vector<char>(expected.begin(), expected.end()));
  EXPECT_TRUE(dpt::read_file<std::vector<uint8_t>>(path) == std::vector<uint8_t>(expected.begin(), expected.end()));

  std::ofstream(dir.path() + "/empty.bin", std::ios::binary);
  EXPECT_EQ(dpt::read_file<std::string>(dir.path() + "/empty.bin"), "");
}

// /proc's files and pipes give no size before they are read: the buffer must grow to take all.
TEST(ReadFile, ReadsAFileWithoutASizeToItsEnd) {
  int ends[2];
  ASSERT_EQ(::pipe(ends), 0) << std::strerror(errno);
  const std::string expected = every_byte_value(3 * 4096 + 17);  // past the first buffer's 4096 twice
  // Within the pipe's buffer (64 KiB), so the write returns before anything reads.
  ASSERT_EQ(::write(ends[1], expected.data(), expected.size()), static_cast<ssize_t>(expected.size()));
  ::close(ends[1]);
  const auto bytes = dpt::read_file<std::string>("/proc/self/fd/" + std::to_string(ends[0]));
  ::close(ends[0]);
  ASSERT_TRUE(bytes) << std::strerror(errno);
  ASSERT_EQ(bytes->size(), expected.size());
  EXPECT_TRUE(*bytes == expected);

  const auto status = dpt::read_file<std::string>("/proc/self/status");
  ASSERT_TRUE(status);
  EXPECT_EQ(status->rfind("Name:", 0), 0u);
  EXPECT_NE(status->find("\nPid:"), std::string::npos);  // lines well past the start are there too
}

// The failure's errno is left for the caller's message.
TEST(ReadFile, SaysWhyItCouldNot) {
  dpt::testing::TempDir dir;
  errno = 0;
  EXPECT_FALSE(dpt::read_file<std::string>(dir.path() + "/absent"));
  EXPECT_EQ(errno, ENOENT);
  errno = 0;
  EXPECT_FALSE(dpt::read_file<std::vector<uint8_t>>(dir.path()));
  EXPECT_EQ(errno, EISDIR);
}

TEST(NulTerminatedEntries, SplitsAsProcWritesThem) {
  using Entries = std::vector<std::string_view>;
  EXPECT_EQ(dpt::nul_terminated_entries("prog\0-a\0\0last\0"s), (Entries{"prog", "-a", "", "last"}));
  EXPECT_EQ(dpt::nul_terminated_entries("a\0b"s), (Entries{"a", "b"}));  // no NUL after the last
  EXPECT_EQ(dpt::nul_terminated_entries("\0"s), (Entries{""}));
  EXPECT_TRUE(dpt::nul_terminated_entries("").empty());
}
