#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <iterator>
#include <string>

#include "dptrain/common/error.h"
#include "dptrain/train/logs/log_file.h"
#include "support/file_contents.h"
#include "support/temp_dir.h"

namespace fs = std::filesystem;
using dpt::testing::file_contents;
using dpt::train::LogFile;

namespace {

}  // namespace

TEST(LogFile, AppendKeepsWhatIsThere) {
  dpt::testing::TempDir dir;
  const fs::path file = fs::path(dir.path()) / "log.txt";
  LogFile::append(file).write("first\n");
  LogFile log = LogFile::append(file);
  log.write("second\n");
  EXPECT_TRUE(log.ok());
  EXPECT_EQ(file_contents(file), "first\nsecond\n");
}

TEST(LogFile, CreateNewRefusesAnExistingFile) {
  dpt::testing::TempDir dir;
  const fs::path file = fs::path(dir.path()) / "events";
  std::optional<LogFile> first = LogFile::create_new(file);
  ASSERT_TRUE(first.has_value());
  first->write("x");
  EXPECT_FALSE(LogFile::create_new(file).has_value());
  EXPECT_EQ(file_contents(file), "x");
}

TEST(LogFile, OpenFailureNamesTheFile) {
  dpt::testing::TempDir dir;
  const fs::path file = fs::path(dir.path()) / "missing" / "log.txt";
  try {
    LogFile::append(file);
    FAIL() << "expected ConfigError";
  } catch (const dpt::ConfigError& e) {
    EXPECT_EQ(std::string(e.what()), "cannot open log file " + file.string() +
                                         ": No such file or directory; check that the output "
                                         "folder exists and is writable");
  }
}

// /dev/full fails every write with ENOSPC: what a full disk does in the middle of a run.
TEST(LogFile, WriteFailureIsReportedOnceAndNeverThrown) {
  LogFile log = LogFile::append("/dev/full");
  ::testing::internal::CaptureStderr();
  log.write("one\n");
  log.write("two\n");
  const std::string err = ::testing::internal::GetCapturedStderr();
  EXPECT_FALSE(log.ok());
  EXPECT_EQ(err, "dptrain: cannot write log file /dev/full: No space left on device; training goes "
                 "on without it\n");
}
