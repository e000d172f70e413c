#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <iterator>
#include <string>

#include "train/logs/event_file.h"
#include "dptrain/train/logs/tensorboard_observer.h"
#include "support/report_samples.h"
#include "support/file_contents.h"
#include "support/temp_dir.h"

namespace fs = std::filesystem;
using dpt::testing::file_contents;
using namespace dpt::train;
using dpt::testing::sample_epoch;
using dpt::testing::sample_step;

namespace {

constexpr double kNow = 1700000000.75;

SummaryWriterOptions writer_options(const std::string& dir) {
  return SummaryWriterOptions(dir).clock([] { return kNow; }).hostname("trainhost");
}

std::string scalar(int64_t step, const std::string& tag, double value) {
  return tf_record(scalar_event(kNow, step, tag, static_cast<float>(value)));
}

}  // namespace

TEST(SummaryWriter, FileNameAndFirstRecord) {
  dpt::testing::TempDir dir;
  SummaryWriter writer(writer_options(dir.path() + "/tb"));
  EXPECT_EQ(writer.path(), fs::path(dir.path()) / "tb" / "events.out.tfevents.1700000000.trainhost");
  writer.add_scalar("a/b", 0.5, 7);
  EXPECT_EQ(file_contents(writer.path()), tf_record(file_version_event(kNow)) + scalar(7, "a/b", 0.5));
}

TEST(SummaryWriter, SecondWriterInTheSameSecondGetsItsOwnFile) {
  dpt::testing::TempDir dir;
  SummaryWriter first(writer_options(dir.path()));
  SummaryWriter second(writer_options(dir.path()));
  EXPECT_EQ(second.path().filename(), "events.out.tfevents.1700000000.trainhost.1");
  EXPECT_EQ(file_contents(first.path()), tf_record(file_version_event(kNow)));
}

TEST(TensorBoardObserver, StepAndEpochScalars) {
  dpt::testing::TempDir dir;
  TensorBoardObserver board(TensorBoardOptions(dir.path()).writer(writer_options(dir.path())).print_freq(10));
  for (int64_t s = 1; s <= 12; ++s) board.on_step(sample_step(s, 12));
  board.on_epoch(sample_epoch("train", 0));
  board.on_epoch(sample_epoch("val", 1));
  board.on_finish();

  std::string expected = tf_record(file_version_event(kNow));
  for (int64_t s : {1, 11}) {
    const StepReport r = sample_step(s, 12);
    expected += scalar(r.global_step, "train/loss", r.loss) + scalar(r.global_step, "train/acc1", r.acc1) +
                scalar(r.global_step, "train/acc5", r.acc5) + scalar(r.global_step, "train/lr", r.lr) +
                scalar(r.global_step, "train/img_per_s", r.images_per_s);
  }
  expected += scalar(48, "train_epoch/loss", 0.5) + scalar(48, "train_epoch/acc1", 40.0) +
              scalar(48, "train_epoch/acc5", 70.5) + scalar(48, "train_epoch/img_per_s", 350.04);
  expected += scalar(48, "val/loss", 0.75) + scalar(48, "val/acc1", 38.25) + scalar(48, "val/acc5", 69.0) +
              scalar(48, "val/img_per_s", 1000.0);
  EXPECT_EQ(file_contents(board.path()), expected);
}
