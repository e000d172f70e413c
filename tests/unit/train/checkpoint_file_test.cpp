#include <gtest/gtest.h>

#include <unistd.h>

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <string>

#include <ATen/core/Dict.h>
#include <torch/torch.h>

#include <caffe2/serialize/inline_container.h>

#include "dptrain/common/error.h"
#include "dptrain/compat/pickle.h"
#include "dptrain/train/checkpoint/checkpoint_file.h"

namespace fs = std::filesystem;
using namespace dpt;
using namespace dpt::train;

namespace {

// A fresh folder per test, removed afterwards.
class CheckpointFile : public ::testing::Test {
 protected:
  void SetUp() override {
    dir = fs::temp_directory_path() /
          ("dptrain_checkpoint_" + std::to_string(::getpid()) + "_" +
           ::testing::UnitTest::GetInstance()->current_test_info()->name());
    fs::remove_all(dir);
    fs::create_directories(dir);
  }
  void TearDown() override { fs::remove_all(dir); }

  static c10::impl::GenericDict state(int64_t epoch) {
    c10::impl::GenericDict d(c10::StringType::get(), c10::AnyType::get());
    d.insert("epoch", epoch);
    d.insert("weights", torch::arange(6, torch::kFloat).reshape({2, 3}) * epoch);
    return d;
  }

  static std::string contents(const fs::path& file) {
    std::ifstream in(file, std::ios::binary);
    return std::string(std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>());
  }

  std::vector<std::string> names() const {
    std::vector<std::string> out;
    for (const auto& entry : fs::directory_iterator(dir)) out.push_back(entry.path().filename());
    std::sort(out.begin(), out.end());
    return out;
  }

  fs::path dir;
};

std::string load_error(const fs::path& file) {
  try {
    load_checkpoint(file);
  } catch (const dpt::CheckpointError& e) {
    return e.what();
  }
  return "no error";
}

}  // namespace

TEST_F(CheckpointFile, RoundTripReplacesTheOldFileAndLeavesNoTemporaries) {
  const fs::path file = epoch_checkpoint_path(dir, 3);
  EXPECT_EQ(file.string(), (dir / "checkpoint_epoch3.pt").string());
  save_checkpoint(state(2), file);
  save_checkpoint(state(3), file);
  const auto loaded = load_checkpoint(file).toGenericDict();
  EXPECT_EQ(loaded.at("epoch").toInt(), 3);
  EXPECT_TRUE(loaded.at("weights").toTensor().equal(torch::arange(6, torch::kFloat).reshape({2, 3}) * 3));
  EXPECT_EQ(names(), (std::vector<std::string>{"checkpoint_epoch3.pt"}));
  EXPECT_THROW(save_checkpoint(state(4), dir / "no_such_folder" / "checkpoint.pt"), dpt::CheckpointError);
}

// The file is pickled as it is written, never whole in memory: the same bytes as the archive in
// memory. (How it is written: tests/unit/common/atomic_file_test.cpp.)
TEST_F(CheckpointFile, StreamedWritesAreTheArchive) {
  c10::impl::GenericDict big = state(4);
  big.insert("moments", torch::randn({3, 1000, 1000}));  // 12 MB
  const fs::path file = dir / kLatestCheckpointName;
  const int64_t size = save_checkpoint(big, file);
  const std::vector<char> archive = dpt::compat::pickle_save(big);
  EXPECT_EQ(size, static_cast<int64_t>(archive.size()));
  EXPECT_EQ(contents(file), std::string(archive.begin(), archive.end()));
}

TEST_F(CheckpointFile, TruncatedOrCorruptFilesGiveACheckpointError) {
  const fs::path file = dir / "checkpoint_epoch1.pt";
  save_checkpoint(state(1), file);
  const auto size = fs::file_size(file);
  for (auto keep : {size - 1, size / 2, uintmax_t{10}, uintmax_t{0}}) {
    fs::resize_file(file, keep);
    const std::string message = load_error(file);
    EXPECT_NE(message.find("checkpoint " + file.string() + " (" + std::to_string(keep) +
                           " bytes) is truncated or corrupt: "),
              std::string::npos)
        << message;
    EXPECT_NE(message.find("an older checkpoint_epoch<N>.pt in its folder may be whole"), std::string::npos)
        << message;
  }
  std::ofstream(file, std::ios::binary) << std::string(4096, '\x5a');
  EXPECT_NE(load_error(file).find("is truncated or corrupt"), std::string::npos);
  EXPECT_EQ(load_error(dir / "missing.pt"),
            "checkpoint " + (dir / "missing.pt").string() +
                " does not exist; check the path given to resume from");
}

// A path that is no file says what it is: a run's output folder lists the .pt files to choose from.
TEST_F(CheckpointFile, APathThatIsNoFileSaysWhatItIs) {
  const auto message = [](const fs::path& path) {
    try {
      check_checkpoint_file(path, "checkpoint", "--resume");
    } catch (const dpt::CheckpointError& e) {
      return std::string(e.what());
    }
    return std::string("no error");
  };
  EXPECT_EQ(message(dir / "missing.pt"),
            "checkpoint " + (dir / "missing.pt").string() + " does not exist; check the path given to --resume");
  EXPECT_EQ(message(dir), "checkpoint " + dir.string() + " is a folder holding no .pt file; give --resume a file");
  for (const char* name : {"model_best.pt", "metrics.jsonl", "checkpoint_epoch2.pt"}) {
    std::ofstream(dir / name) << "x";
  }
  fs::create_directories(dir / "old.pt");  // a folder, whatever its name
  EXPECT_EQ(message(dir), "checkpoint " + dir.string() +
                              " is a folder; give --resume one of its files: checkpoint_epoch2.pt, model_best.pt");
  EXPECT_EQ(message(dir / "model_best.pt"), "no error");
}

// What fuzz/checkpoint_fuzzer.cpp found: archives whose zip directory sends LibTorch's reader past
// the end of the file (it read there and crashed), pickles that claim gigabytes, a memo slot that
// would have grown LibTorch's memo to 25 GB.
TEST(CheckpointFuzzRegressions, EachIsACheckpointError) {
  int inputs = 0;
  for (const auto& entry : fs::directory_iterator(fs::path(DPTRAIN_FUZZ_REGRESSIONS) / "checkpoint")) {
    EXPECT_NE(load_error(entry.path()).find("is truncated or corrupt"), std::string::npos) << entry.path();
    ++inputs;
  }
  EXPECT_GE(inputs, 3);
}

// A pickle's lengths are checked before LibTorch allocates them: 4 GB claimed in a 12-byte pickle.
TEST(CheckpointPickle, LengthsPastTheEndAreRefusedBeforeTheyAreAllocated) {
  auto archive_of = [](const std::string& pickle) {
    std::vector<char> archive;
    caffe2::serialize::PyTorchStreamWriter writer([&](const void* data, size_t size) {
      archive.insert(archive.end(), static_cast<const char*>(data), static_cast<const char*>(data) + size);
      return size;
    });
    writer.writeRecord("data.pkl", pickle.data(), pickle.size());
    writer.writeEndOfFile();
    return archive;
  };
  EXPECT_EQ(dpt::compat::pickle_load(archive_of(std::string("\x80\x02K\x07.", 5))).toInt(), 7);
  try {
    dpt::compat::pickle_load(archive_of(std::string("\x80\x02X\xf0\xff\xff\xff" "abc.", 11)));
    ADD_FAILURE() << "a 4 GB string in 11 bytes was read";
  } catch (const c10::Error& e) {
    EXPECT_NE(std::string(e.what()).find("claims 4294967280 bytes, and 4 are left"), std::string::npos) << e.what();
  }
  // A memo slot is checked too: LibTorch grows its memo up to the slot a LONG_BINPUT names (1.6
  // billion slots, 25 GB, in what the fuzzer found).
  EXPECT_EQ(dpt::compat::pickle_load(archive_of(std::string("\x80\x02K\x07r\x00\x00\x00\x00.", 10))).toInt(), 7);
  try {
    dpt::compat::pickle_load(archive_of(std::string("\x80\x02K\x07rcl._.", 10)));
    ADD_FAILURE() << "memo slot 1596877923 was filled";
  } catch (const c10::Error& e) {
    EXPECT_NE(std::string(e.what()).find("names memo slot 1596877923, more than a pickle of 10 bytes"),
              std::string::npos) << e.what();
  }
  for (const std::string& broken : {std::string("\x80\x02K", 3), std::string("\x80\x02\xff.", 4),
                                    std::string("\x80\x02" "cbuiltins\nlen", 14)}) {
    EXPECT_THROW(dpt::compat::pickle_load(archive_of(broken)), c10::Error) << broken;
  }
}

TEST_F(CheckpointFile, RotationKeepsExactlyTheLastK) {
  for (int64_t epoch : {1, 2, 9, 10, 11}) save_checkpoint(state(epoch), epoch_checkpoint_path(dir, epoch));
  save_checkpoint(state(9), dir / kBestCheckpointName);
  std::ofstream(dir / "notes.txt") << "kept";
  std::vector<std::string> deleted;  // as strings: gtest cannot print paths
  for (const auto& file : rotate_checkpoints(dir, 2)) deleted.push_back(file.filename());
  EXPECT_EQ(deleted, (std::vector<std::string>{"checkpoint_epoch1.pt", "checkpoint_epoch2.pt",
                                               "checkpoint_epoch9.pt"}));
  EXPECT_EQ(names(), (std::vector<std::string>{"checkpoint_epoch10.pt", "checkpoint_epoch11.pt",
                                               "model_best.pt", "notes.txt"}));
  EXPECT_TRUE(rotate_checkpoints(dir, 2).empty());
  rotate_checkpoints(dir, 1);
  EXPECT_EQ(names(), (std::vector<std::string>{"checkpoint_epoch11.pt", "model_best.pt", "notes.txt"}));
  EXPECT_THROW(rotate_checkpoints(dir, 0), dpt::ConfigError);
}
