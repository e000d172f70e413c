#include <gtest/gtest.h>

#include <sys/resource.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <condition_variable>
#include <filesystem>
#include <fstream>
#include <functional>
#include <iterator>
#include <limits>
#include <mutex>
#include <string>
#include <thread>

#include <torch/torch.h>

#include "dptrain/train/checkpoint/checkpoint_file.h"
#include "dptrain/train/checkpoint/checkpoint_writer.h"
#include "support/temp_dir.h"

namespace fs = std::filesystem;
using namespace dpt::train;

namespace {

// Holds every write at its start until released: a write stays in flight as long as a test needs.
class Gate {
 public:
  std::function<void()> hook() {
    return [this] {
      std::unique_lock<std::mutex> lock(mutex_);
      open_.wait(lock, [this] { return released_; });
    };
  }
  void release() {
    {
      std::lock_guard<std::mutex> lock(mutex_);
      released_ = true;
    }
    open_.notify_all();
  }

 private:
  std::mutex mutex_;
  std::condition_variable open_;
  bool released_ = false;
};

// A state as the trainer's: a dict of a weight (live, changed by training) and a position.
CheckpointRequest request_for(const at::Tensor& weight, int64_t step, const fs::path& dir) {
  c10::impl::GenericDict state(c10::StringType::get(), c10::AnyType::get());
  state.insert("weight", weight);
  state.insert("step", step);
  CheckpointRequest request;
  request.state = state;
  request.dir = dir;
  request.step = step;
  return request;
}

at::Tensor saved_weight(const fs::path& file) { return load_checkpoint(file).toGenericDict().at("weight").toTensor(); }

// The file holds the weights as they were at submit(), not as training changed them while the
// write was in flight; and channels_last stays channels_last.
TEST(CheckpointWriter, WritesTheStateAsSubmittedWhileTrainingChangesIt) {
  dpt::testing::TempDir dir;
  Gate gate;
  CheckpointWriter writer(CheckpointWriterOptions().before_write(gate.hook()));
  at::Tensor weight = torch::arange(24, torch::kFloat).reshape({1, 2, 3, 4}).contiguous(at::MemoryFormat::ChannelsLast);
  const at::Tensor submitted = weight.clone();
  ASSERT_TRUE(writer.submit(request_for(weight, 7, dir.path()), WhenBusy::Wait));
  EXPECT_TRUE(writer.busy());
  weight.mul_(-1);  // the next optimizer step, while the write waits at the gate
  gate.release();
  writer.wait();
  const auto writes = writer.finished();
  ASSERT_EQ(writes.size(), 1u);
  EXPECT_TRUE(writes[0].ok()) << writes[0].error;
  EXPECT_EQ(writes[0].step, 7);
  EXPECT_EQ(writes[0].file, fs::path(dir.path()) / kLatestCheckpointName);
  EXPECT_EQ(writes[0].bytes, static_cast<int64_t>(fs::file_size(writes[0].file)));
  const at::Tensor saved = saved_weight(writes[0].file);
  EXPECT_TRUE(saved.equal(submitted));
  EXPECT_FALSE(saved.equal(weight));  // what writing the live tensor would have given differs
  EXPECT_EQ(saved.strides(), submitted.strides());
  // The first checkpoint of a folder is also its best so far.
  EXPECT_TRUE(saved_weight(fs::path(dir.path()) / kBestCheckpointName).equal(submitted));
  EXPECT_TRUE(writer.finished().empty());
}

// One write in flight at most: a periodic request is skipped (nothing taken), an epoch's waits.
TEST(CheckpointWriter, ARequestFindingAWriteInFlightIsSkippedOrWaits) {
  dpt::testing::TempDir dir;
  Gate gate;
  CheckpointWriter writer(CheckpointWriterOptions().before_write(gate.hook()));
  at::Tensor weight = torch::ones({3});
  ASSERT_TRUE(writer.submit(request_for(weight, 1, dir.path()), WhenBusy::Skip));
  EXPECT_FALSE(writer.submit(request_for(weight * 2, 2, dir.path()), WhenBusy::Skip));
  EXPECT_EQ(writer.last_step(), 1);
  gate.release();
  CheckpointRequest epoch = request_for(weight * 3, 3, dir.path());
  epoch.epoch_done = 1;
  ASSERT_TRUE(writer.submit(std::move(epoch), WhenBusy::Wait));
  writer.wait();
  const auto writes = writer.finished();
  ASSERT_EQ(writes.size(), 2u);
  EXPECT_EQ(writes[0].step, 1);
  EXPECT_EQ(writes[1].step, 3);
  EXPECT_TRUE(saved_weight(fs::path(dir.path()) / kLatestCheckpointName).equal(torch::full({3}, 3.0)));
  EXPECT_TRUE(saved_weight(epoch_checkpoint_path(dir.path(), 1)).equal(torch::full({3}, 3.0)));
  // model_best.pt came with the first write and was not asked for again.
  EXPECT_TRUE(saved_weight(fs::path(dir.path()) / kBestCheckpointName).equal(torch::ones({3})));
}

// model_best.pt: a diverged model's checkpoint (Keep) never becomes it, not even as the folder's
// first; the next one does where there is none (IfNone), a new best replaces it, and only that.
TEST(CheckpointWriter, ModelBestIsReplacedOnlyByANewBestAndNeverByADivergedModel) {
  dpt::testing::TempDir dir;
  const fs::path best = fs::path(dir.path()) / kBestCheckpointName;
  CheckpointWriter writer(CheckpointWriterOptions().background(false));
  auto write = [&](double value, BestModel choice) {
    CheckpointRequest request = request_for(torch::full({2}, value), static_cast<int64_t>(value), dir.path());
    request.best = choice;
    ASSERT_TRUE(writer.submit(std::move(request), WhenBusy::Wait));
    ASSERT_TRUE(writer.finished().at(0).ok());
  };
  write(1, BestModel::Keep);
  EXPECT_FALSE(fs::exists(best));
  write(2, BestModel::IfNone);
  EXPECT_TRUE(saved_weight(best).equal(torch::full({2}, 2.0)));
  write(3, BestModel::IfNone);
  write(4, BestModel::Keep);
  EXPECT_TRUE(saved_weight(best).equal(torch::full({2}, 2.0)));
  write(5, BestModel::Replace);
  EXPECT_TRUE(saved_weight(best).equal(torch::full({2}, 5.0)));
}

// A write that fails is reported with the file and the reason, the good files stay, and the next
// write succeeds once the cause is gone.
TEST(CheckpointWriter, AFailedWriteIsReportedAndKeepsTheGoodFile) {
  dpt::testing::TempDir dir;
  const fs::path latest = fs::path(dir.path()) / kLatestCheckpointName;
  CheckpointWriter writer;
  ASSERT_TRUE(writer.submit(request_for(torch::ones({2}), 1, dir.path()), WhenBusy::Wait));
  writer.wait();
  ASSERT_TRUE(writer.finished().at(0).ok());
  // The next write's temporary file cannot be created: a folder is in its way.
  const fs::path blocker = latest.string() + ".tmp." + std::to_string(::getpid());
  fs::create_directory(blocker);
  ASSERT_TRUE(writer.submit(request_for(torch::zeros({2}), 2, dir.path()), WhenBusy::Wait));
  writer.wait();
  auto writes = writer.finished();
  ASSERT_EQ(writes.size(), 1u);
  EXPECT_FALSE(writes[0].ok());
  EXPECT_EQ(writes[0].error, "cannot create " + blocker.string() +
                                 ": Is a directory; check that the folder exists, is writable and has free space");
  EXPECT_TRUE(saved_weight(latest).equal(torch::ones({2})));
  fs::remove(blocker);
  ASSERT_TRUE(writer.submit(request_for(torch::zeros({2}), 3, dir.path()), WhenBusy::Wait));
  writer.wait();
  writes = writer.finished();
  ASSERT_EQ(writes.size(), 1u);
  EXPECT_TRUE(writes[0].ok()) << writes[0].error;
  EXPECT_TRUE(saved_weight(latest).equal(torch::zeros({2})));
}

// A state holding NaN or an infinity is not written, in the background or not, and the write's
// error names the tensor: the good file stays. Integer tensors are not read; a strided one (not
// dense) is read where it lies in the foreground, as the snapshot's copy in the background.
TEST(CheckpointWriter, AStateHoldingNaNOrAnInfinityIsNotWritten) {
  for (const bool background : {true, false}) {
    SCOPED_TRACE(background ? "background" : "foreground");
    dpt::testing::TempDir dir;
    const fs::path latest = fs::path(dir.path()) / kLatestCheckpointName;
    CheckpointWriter writer(CheckpointWriterOptions().background(background));
    auto with_momentum = [&](const at::Tensor& momentum, int64_t step) {
      CheckpointRequest request = request_for(torch::ones({2}), step, dir.path());
      c10::impl::GenericDict slot(c10::StringType::get(), c10::AnyType::get());
      slot.insert("momentum_buffer", momentum);
      c10::impl::GenericList slots(c10::AnyType::get());
      slots.push_back(torch::full({3}, std::numeric_limits<int64_t>::max(), torch::kLong));
      slots.push_back(slot);
      request.state.toGenericDict().insert("optimizer", slots);
      return request;
    };
    ASSERT_TRUE(writer.submit(with_momentum(torch::zeros({4}), 1), WhenBusy::Wait));
    writer.wait();
    ASSERT_TRUE(writer.finished().at(0).ok());
    const double inf = std::numeric_limits<double>::infinity();
    const at::Tensor strided = torch::tensor({0.0, 9.0, 1.0, 9.0, 2.0, 9.0, inf, 9.0}, torch::kDouble).slice(0, 0, 8, 2);
    for (const at::Tensor& bad : {torch::tensor({0.0, std::nan(""), 1.0, 2.0}).to(torch::kFloat),
                                  torch::tensor({0.0, 1.0, 2.0, -inf}).to(torch::kBFloat16), strided}) {
      ASSERT_TRUE(writer.submit(with_momentum(bad, 2), WhenBusy::Wait));
      writer.wait();
      const auto writes = writer.finished();
      ASSERT_EQ(writes.size(), 1u);
      EXPECT_EQ(writes[0].error, "its tensor optimizer/1/momentum_buffer holds NaN or an infinity: training has "
                                 "diverged (lower --lr, lengthen --warmup-epochs or clip with --clip-grad-norm)");
      EXPECT_EQ(load_checkpoint(latest).toGenericDict().at("step").toInt(), 1);
    }
  }
}

// Written in the caller's thread, the files are the same bytes, and the pause is the whole write.
TEST(CheckpointWriter, InTheForegroundWritesTheSameFileBeforeReturning) {
  dpt::testing::TempDir background_dir, foreground_dir;
  const at::Tensor weight = torch::arange(12, torch::kFloat).reshape({3, 4});
  CheckpointWriter background;
  CheckpointWriter foreground(CheckpointWriterOptions().background(false));
  ASSERT_TRUE(background.submit(request_for(weight, 5, background_dir.path()), WhenBusy::Wait));
  ASSERT_TRUE(foreground.submit(request_for(weight, 5, foreground_dir.path()), WhenBusy::Wait));
  EXPECT_FALSE(foreground.busy());
  const auto written = foreground.finished();
  ASSERT_EQ(written.size(), 1u);
  EXPECT_GE(written[0].paused_s, written[0].write_s());
  background.wait();
  auto read = [](const std::string& dir) {
    std::ifstream in(fs::path(dir) / kLatestCheckpointName, std::ios::binary);
    return std::string(std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>());
  };
  EXPECT_EQ(read(background_dir.path()), read(foreground_dir.path()));
}

}  // namespace

#if defined(__linux__)
// The background write runs at the lowest CPU priority, on its own thread only: the training
// thread keeps its own. Off, the writer keeps the process's.
TEST(CheckpointWriter, WritesAtTheLowestPriorityWithoutLoweringTraining) {
  dpt::testing::TempDir dir;
  const auto this_thread = [] { return ::getpriority(PRIO_PROCESS, static_cast<id_t>(::syscall(SYS_gettid))); };
  const int training = this_thread();
  for (const bool low : {true, false}) {
    int writing = -100;
    {
      CheckpointWriter writer(CheckpointWriterOptions().low_priority(low).before_write([&] { writing = this_thread(); }));
      ASSERT_TRUE(writer.submit(request_for(torch::ones({2}), 1, dir.path()), WhenBusy::Wait));
      writer.wait();
    }
    EXPECT_EQ(writing, low ? 19 : training) << "low_priority " << low;
    EXPECT_EQ(this_thread(), training);
  }
}
#endif

// Memory prepared in the background from a state's shapes serves the first snapshot: the file
// holds the weights as submitted, a channels_last one still channels_last. A writer in the
// caller's thread prepares nothing.
TEST(CheckpointWriter, PreparesTheFirstSnapshotsMemoryInTheBackground) {
  dpt::testing::TempDir dir;
  at::Tensor weight = torch::arange(2 * 3 * 4 * 5, torch::kFloat).reshape({2, 3, 4, 5}).contiguous(at::MemoryFormat::ChannelsLast);
  CheckpointWriter writer;
  writer.prepare(request_for(weight, 0, dir.path()).state);
  for (int i = 0; i < 1000 && !writer.prepared(); ++i) std::this_thread::sleep_for(std::chrono::milliseconds(10));
  ASSERT_TRUE(writer.prepared());
  const at::Tensor expected = weight.clone();
  ASSERT_TRUE(writer.submit(request_for(weight, 1, dir.path()), WhenBusy::Wait));
  EXPECT_FALSE(writer.prepared()) << "the snapshot took the prepared memory";
  weight.add_(1);  // training goes on
  writer.wait();
  const at::Tensor saved = saved_weight(dir.path() + "/checkpoint.pt");
  EXPECT_TRUE(torch::equal(saved, expected));
  EXPECT_TRUE(saved.is_contiguous(at::MemoryFormat::ChannelsLast));

  CheckpointWriter blocking(CheckpointWriterOptions().background(false));
  blocking.prepare(request_for(weight, 0, dir.path()).state);
  EXPECT_FALSE(blocking.prepared());
}
