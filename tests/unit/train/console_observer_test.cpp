#include <gtest/gtest.h>

#include <fcntl.h>
#include <stdlib.h>
#include <unistd.h>

#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <limits>
#include <string>

#include "dptrain/common/error.h"
#include "dptrain/train/logs/console_observer.h"
#include "support/report_samples.h"

using dpt::testing::sample_epoch;
using dpt::testing::sample_step;
using dpt::train::ConsoleObserver;
using dpt::train::ConsoleOptions;

namespace {

// A FILE* writing into memory (not a terminal).
class MemoryFile {
 public:
  MemoryFile() : file_(::open_memstream(&data_, &size_)) {}
  ~MemoryFile() {
    std::fclose(file_);
    std::free(data_);
  }
  MemoryFile(const MemoryFile&) = delete;
  MemoryFile& operator=(const MemoryFile&) = delete;
  FILE* get() { return file_; }
  std::string text() {
    std::fflush(file_);
    return std::string(data_, size_);
  }

 private:
  char* data_ = nullptr;
  size_t size_ = 0;
  FILE* file_;
};

}  // namespace

TEST(ConsoleObserver, PlainLinesEveryPrintFreqSteps) {
  MemoryFile out;
  ConsoleObserver console(ConsoleOptions().out(out.get()).print_freq(5));
  EXPECT_FALSE(console.interactive());  // not a terminal
  for (int64_t step = 1; step <= 12; ++step) console.on_step(sample_step(step, 12));
  console.on_epoch(sample_epoch("train", 0));
  console.on_epoch(sample_epoch("val", 2));
  console.on_finish();
  EXPECT_EQ(out.text(),
            "Epoch: [3][ 1/12]  Loss 2.0000  Acc@1 3.33  Acc@5 51.00  lr 0.1000  img/s 345.6  ETA 0:00:17\n"
            "Epoch: [3][ 6/12]  Loss 0.3333  Acc@1 20.00  Acc@5 56.00  lr 0.1000  img/s 345.6  ETA 0:00:09\n"
            "Epoch: [3][11/12]  Loss 0.1818  Acc@1 36.67  Acc@5 61.00  lr 0.1000  img/s 345.6  ETA 0:00:02\n"
            "Epoch: [3] train  Loss 0.5000  Acc@1 40.00  Acc@5 70.50  samples 1536  img/s 350.0  time 4.4s\n"
            "Epoch: [3] val    Loss 0.7500  Acc@1 38.25  Acc@5 69.00  samples 500  img/s 1000.0  time 0.5s"
            "  bad images 2\n");
}

// `dptrain eval`'s pass is in no epoch, and says so.
TEST(ConsoleObserver, AnEvaluationOfItsOwnNamesNoEpoch) {
  MemoryFile out;
  ConsoleObserver console(ConsoleOptions().out(out.get()));
  auto pass = sample_epoch("val", 0);
  pass.standalone = true;
  console.on_epoch(pass);
  EXPECT_EQ(out.text(), "Eval: val    Loss 0.7500  Acc@1 38.25  Acc@5 69.00  samples 500  img/s 1000.0  time 0.5s\n");
}

TEST(ConsoleObserver, LearningRateAndEtaFormats) {
  MemoryFile out;
  ConsoleObserver console(ConsoleOptions().out(out.get()).print_freq(1).interactive(false));
  auto step = sample_step(1, 1000);
  step.lr = 0.00025;
  step.eta_s = 3725;
  console.on_step(step);
  step.lr = 1e-5;
  step.eta_s = 100000.4;
  console.on_step(step);
  step.lr = 0.4;
  step.eta_s = std::numeric_limits<double>::quiet_NaN();
  step.loss = std::numeric_limits<double>::infinity();
  console.on_step(step);
  // Below 100 images/s, four significant digits: a large model's rate keeps its precision.
  step.loss = 2;
  step.eta_s = 17;
  for (double rate : {99.994, 1.09874, 0.0123456}) {
    step.images_per_s = rate;
    console.on_step(step);
  }
  EXPECT_EQ(out.text(),
            "Epoch: [3][   1/1000]  Loss 2.0000  Acc@1 3.33  Acc@5 51.00  lr 0.0002500  img/s 345.6  ETA 1:02:05\n"
            "Epoch: [3][   1/1000]  Loss 2.0000  Acc@1 3.33  Acc@5 51.00  lr 1.000e-05  img/s 345.6  ETA 27:46:40\n"
            "Epoch: [3][   1/1000]  Loss inf  Acc@1 3.33  Acc@5 51.00  lr 0.4000  img/s 345.6  ETA -:--:--\n"
            "Epoch: [3][   1/1000]  Loss 2.0000  Acc@1 3.33  Acc@5 51.00  lr 0.4000  img/s 99.99  ETA 0:00:17\n"
            "Epoch: [3][   1/1000]  Loss 2.0000  Acc@1 3.33  Acc@5 51.00  lr 0.4000  img/s 1.099  ETA 0:00:17\n"
            "Epoch: [3][   1/1000]  Loss 2.0000  Acc@1 3.33  Acc@5 51.00  lr 0.4000  img/s 0.01235  ETA 0:00:17\n");
}

// The model's FLOP/s follow the throughput they come from, in GFLOP/s below 1000 and TFLOP/s from
// there, with the fraction of the peak when one was measured; nothing when not counted.
TEST(ConsoleObserver, ModelRateAndMfu) {
  MemoryFile out;
  ConsoleObserver console(ConsoleOptions().out(out.get()).print_freq(1).interactive(false));
  auto step = sample_step(11, 12);
  step.model_rate.flop_per_s = 231.4e9;
  console.on_step(step);
  step.model_rate.mfu = 0.4249;
  console.on_step(step);
  auto epoch = sample_epoch("train", 0);
  epoch.model_rate = {1.2345e12, 0.61};
  console.on_epoch(epoch);
  EXPECT_EQ(out.text(),
            "Epoch: [3][11/12]  Loss 0.1818  Acc@1 36.67  Acc@5 61.00  lr 0.1000  img/s 345.6  ETA 0:00:02"
            "  GFLOP/s 231\n"
            "Epoch: [3][11/12]  Loss 0.1818  Acc@1 36.67  Acc@5 61.00  lr 0.1000  img/s 345.6  ETA 0:00:02"
            "  GFLOP/s 231  MFU 42%\n"
            "Epoch: [3] train  Loss 0.5000  Acc@1 40.00  Acc@5 70.50  samples 1536  img/s 350.0  time 4.4s"
            "  TFLOP/s 1.23  MFU 61%\n");
}

// One line per epoch, redrawn after each step; a shorter line is padded over the longer one, a
// pass that ends early gets its line ended before the summary, and the last step ends the line.
TEST(ConsoleObserver, InteractiveBar) {
  MemoryFile out;
  ConsoleObserver console(ConsoleOptions().out(out.get()).print_freq(100).interactive(true));
  auto first = sample_step(1, 4);
  first.images_per_s = 1000.0;
  console.on_step(first);
  console.on_step(sample_step(2, 4));
  console.on_epoch(sample_epoch("train", 0));
  console.on_step(sample_step(4, 4));
  console.on_finish();
  EXPECT_EQ(out.text(),
            "\rEpoch: [3] [=====>..............] 1/4  Loss 2.0000  Acc@1 3.33  Acc@5 51.00  lr 0.1000  img/s 1000.0  ETA 0:00:05"
            "\rEpoch: [3] [==========>.........] 2/4  Loss 1.0000  Acc@1 6.67  Acc@5 52.00  lr 0.1000  img/s 345.6  ETA 0:00:03 "
            "\n"
            "Epoch: [3] train  Loss 0.5000  Acc@1 40.00  Acc@5 70.50  samples 1536  img/s 350.0  time 4.4s\n"
            "\rEpoch: [3] [====================] 4/4  Loss 0.5000  Acc@1 13.33  Acc@5 54.00  lr 0.1000  img/s 345.6  ETA 0:00:00\n");
}

TEST(ConsoleObserver, FinishEndsAnOpenLine) {
  MemoryFile out;
  ConsoleObserver console(ConsoleOptions().out(out.get()).interactive(true));
  console.on_step(sample_step(3, 4));
  console.on_finish();
  console.on_finish();
  EXPECT_EQ(out.text(),
            "\rEpoch: [3] [===============>....] 3/4  Loss 0.6667  Acc@1 10.00  Acc@5 53.00  lr 0.1000  img/s 345.6  ETA 0:00:02\n");
}

// A pseudo-terminal stands in for an interactive console.
TEST(ConsoleObserver, DetectsATerminal) {
  const int master = ::posix_openpt(O_RDWR | O_NOCTTY);
  ASSERT_GE(master, 0);
  ASSERT_EQ(::grantpt(master), 0);
  ASSERT_EQ(::unlockpt(master), 0);
  FILE* terminal = std::fopen(::ptsname(master), "w");
  ASSERT_NE(terminal, nullptr);
  EXPECT_TRUE(ConsoleObserver(ConsoleOptions().out(terminal)).interactive());
  EXPECT_FALSE(ConsoleObserver(ConsoleOptions().out(terminal).interactive(false)).interactive());
  std::fclose(terminal);
  ::close(master);
}

TEST(ConsoleObserver, PrintFreqMustBePositive) {
  MemoryFile out;
  try {
    ConsoleObserver console(ConsoleOptions().out(out.get()).print_freq(0));
    FAIL() << "expected ConfigError";
  } catch (const dpt::ConfigError& e) {
    EXPECT_EQ(std::string(e.what()), "--print-freq must be at least 1, got 0");
  }
}
