#include <gtest/gtest.h>

#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <random>
#include <string>
#include <vector>

#include "dptrain/common/atomic_file.h"
#include "dptrain/common/error.h"
#include "support/error_of.h"

namespace fs = std::filesystem;

namespace {

// A fresh folder per test, removed afterwards.
class AtomicFile : public ::testing::Test {
 protected:
  void SetUp() override {
    dir = fs::temp_directory_path() / ("dptrain_atomic_" + std::to_string(::getpid()) + "_" +
                                       ::testing::UnitTest::GetInstance()->current_test_info()->name());
    fs::remove_all(dir);
    fs::create_directories(dir);
  }
  void TearDown() override { fs::remove_all(dir); }

  static int64_t write(const fs::path& file, const std::string& text) {
    return dpt::write_file_atomically(file, [&](const dpt::ByteWriter& out) { out(text.data(), text.size()); });
  }

  static std::string contents(const fs::path& file) {
    std::ifstream in(file, std::ios::binary);
    return std::string(std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>());
  }

  std::vector<std::string> names() const {  // as strings: gtest cannot print paths
    std::vector<std::string> out;
    for (const auto& entry : fs::directory_iterator(dir)) out.push_back(entry.path().filename());
    std::sort(out.begin(), out.end());
    return out;
  }

  fs::path dir;
};

}  // namespace

TEST_F(AtomicFile, ReplacesTheOldFileAndLeavesNoTemporaries) {
  const fs::path file = dir / "state.pt";
  EXPECT_EQ(write(file, "first"), 5);
  EXPECT_EQ(write(file, "second, longer"), 14);
  EXPECT_EQ(contents(file), "second, longer");
  EXPECT_EQ(names(), std::vector<std::string>{"state.pt"});
}

// The contents come piece by piece, never whole in memory; one that fails half-way leaves the old
// file and no temporary, and its exception passes through.
TEST_F(AtomicFile, AWriteThatFailsHalfWayLeavesTheOldFileAndNoTemporary) {
  const fs::path file = dir / "state.pt";
  write(file, "old");
  EXPECT_THROW(dpt::write_file_atomically(file,
                                          [](const dpt::ByteWriter& out) {
                                            out("half", 4);
                                            throw dpt::DataError("the state could not be read");
                                          }),
               dpt::DataError);
  EXPECT_EQ(contents(file), "old");
  EXPECT_EQ(names(), std::vector<std::string>{"state.pt"});
}

TEST_F(AtomicFile, CopiesOfSeveralChunksAreExact) {
  std::string bytes(12 << 20, '\0');  // 12 MB: several of the copy's chunks
  std::mt19937 random(7);
  std::generate(bytes.begin(), bytes.end(), [&] { return static_cast<char>(random()); });
  write(dir / "state.pt", bytes);
  dpt::copy_file_atomically(dir / "state.pt", dir / "copy.pt");
  EXPECT_EQ(contents(dir / "copy.pt"), bytes);
  EXPECT_FALSE(fs::equivalent(dir / "state.pt", dir / "copy.pt"));
  EXPECT_EQ(names(), (std::vector<std::string>{"copy.pt", "state.pt"}));
}

// Further names of a file that is replaced, never changed: one file on disk, and each name keeps
// its version when the first is replaced.
TEST_F(AtomicFile, LinkedNamesShareTheFileAndKeepTheirVersion) {
  const fs::path latest = dir / "checkpoint.pt", epoch1 = dir / "checkpoint_epoch1.pt", best = dir / "model_best.pt";
  write(latest, "epoch 1");
  dpt::link_or_copy_file_atomically(latest, epoch1);
  dpt::link_or_copy_file_atomically(latest, best);
  dpt::link_or_copy_file_atomically(latest, best);  // already that file: nothing changes, nothing is left
  EXPECT_TRUE(fs::equivalent(latest, epoch1));
  EXPECT_TRUE(fs::equivalent(latest, best));
  EXPECT_EQ(fs::hard_link_count(latest), 3u);
  EXPECT_EQ(names(), (std::vector<std::string>{"checkpoint.pt", "checkpoint_epoch1.pt", "model_best.pt"}));

  write(latest, "epoch 2");
  EXPECT_FALSE(fs::equivalent(latest, epoch1));
  EXPECT_EQ(fs::hard_link_count(epoch1), 2u);
  EXPECT_EQ(contents(epoch1), "epoch 1");
  EXPECT_EQ(contents(best), "epoch 1");
  EXPECT_EQ(contents(latest), "epoch 2");
}

// Across file systems (here /dev/shm's tmpfs and the test's folder) a link is refused: a copy.
TEST_F(AtomicFile, WhereLinksAreRefusedTheNameIsACopy) {
  const fs::path elsewhere = fs::path("/dev/shm") / ("dptrain_atomic_" + std::to_string(::getpid()) + ".pt");
  write(elsewhere, "kept apart");
  struct stat source {}, folder {};
  ASSERT_EQ(::stat(elsewhere.c_str(), &source), 0);
  ASSERT_EQ(::stat(dir.c_str(), &folder), 0);
  ASSERT_NE(source.st_dev, folder.st_dev) << "/dev/shm and " << dir << " are one file system: no refused link to test";
  dpt::link_or_copy_file_atomically(elsewhere, dir / "model_best.pt");
  EXPECT_EQ(contents(dir / "model_best.pt"), "kept apart");
  EXPECT_EQ(fs::hard_link_count(elsewhere), 1u);
  EXPECT_EQ(names(), std::vector<std::string>{"model_best.pt"});
  fs::remove(elsewhere);
}

// A writer killed before its rename leaves <name>.tmp.<pid>: removed once that process is gone,
// never while it may still be writing, and nothing else with .tmp. in its name.
TEST_F(AtomicFile, UnfinishedWritesOfDeadProcessesAreRemoved) {
  const pid_t child = ::fork();
  if (child == 0) ::_exit(0);
  ASSERT_GT(child, 0);
  ASSERT_EQ(::waitpid(child, nullptr, 0), child);  // reaped: its pid names no process now
  const std::string dead = "checkpoint.pt.tmp." + std::to_string(child);
  const std::string running = "model_best.pt.tmp." + std::to_string(::getpid());
  for (const auto& name : {dead, running, std::string("notes.tmp.txt")}) std::ofstream(dir / name) << "partial";
  write(dir / "checkpoint.pt", "whole");
  std::vector<std::string> deleted;
  for (const auto& file : dpt::remove_unfinished_writes(dir)) deleted.push_back(file.filename());
  EXPECT_EQ(deleted, std::vector<std::string>{dead});
  EXPECT_EQ(names(), (std::vector<std::string>{"checkpoint.pt", running, "notes.tmp.txt"}));
}

TEST_F(AtomicFile, AWriteThatCannotStartLeavesTheOldFileAndSaysWhy) {
  const fs::path file = dir / "checkpoint_epoch1.pt";
  write(file, "before");
  // A folder where the temporary file should go makes the write fail after the old file exists.
  const fs::path blocker(file.string() + ".tmp." + std::to_string(::getpid()));
  fs::create_directory(blocker);
  EXPECT_EQ(dpt::testing::error_of<dpt::CheckpointError>([&] { write(file, "after"); }),
            "cannot create " + blocker.string() +
                ": Is a directory; check that the folder exists, is writable and has free space");
  EXPECT_EQ(contents(file), "before");
  EXPECT_TRUE(fs::is_directory(blocker));
  fs::remove(blocker);

  EXPECT_THROW(write(dir / "no_such_folder" / "checkpoint.pt", "after"), dpt::CheckpointError);
  if (::geteuid() != 0) {  // root writes anywhere
    fs::permissions(dir, fs::perms::owner_read | fs::perms::owner_exec);
    EXPECT_THROW(write(file, "after"), dpt::CheckpointError);
    fs::permissions(dir, fs::perms::owner_all);
    EXPECT_EQ(contents(file), "before");
  }
}
