#include <gtest/gtest.h>

#include <algorithm>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <string>

#include "dptrain/common/error.h"
#include "dptrain/train/logs/console_observer.h"
#include "dptrain/train/logs/jsonl_observer.h"
#include "dptrain/train/logs/observers.h"
#include "dptrain/train/logs/tensorboard_observer.h"
#include "support/temp_dir.h"

namespace fs = std::filesystem;
using namespace dpt::train;

namespace {

template <typename T>
int count(const std::vector<std::shared_ptr<TrainObserver>>& observers) {
  int n = 0;
  for (const auto& o : observers) n += dynamic_cast<T*>(o.get()) != nullptr;
  return n;
}

std::vector<std::string> file_names(const fs::path& dir) {
  std::vector<std::string> names;
  for (const auto& entry : fs::directory_iterator(dir)) names.push_back(entry.path().filename());
  std::sort(names.begin(), names.end());
  return names;
}

std::string config_error(const LogOptions& options) {
  try {
    make_observers(options);
  } catch (const dpt::ConfigError& e) {
    return e.what();
  }
  return "no error";
}

}  // namespace

TEST(MakeObservers, ConsoleOnlyWithoutOutputFolder) {
  const auto observers = make_observers(LogOptions().console(stderr));
  ASSERT_EQ(observers.size(), 1u);
  EXPECT_EQ(count<ConsoleObserver>(observers), 1);
}

TEST(MakeObservers, AllLogsInTheOutputFolder) {
  dpt::testing::TempDir dir;
  const fs::path out = fs::path(dir.path()) / "run";
  const auto observers = make_observers(LogOptions().output_dir(out).console(stderr).print_freq(2));
  EXPECT_EQ(observers.size(), 3u);
  EXPECT_EQ(count<ConsoleObserver>(observers), 1);
  EXPECT_EQ(count<JsonlObserver>(observers), 1);
  EXPECT_EQ(count<TensorBoardObserver>(observers), 1);
  const std::vector<std::string> names = file_names(out);
  ASSERT_EQ(names.size(), 2u);
  EXPECT_EQ(names[0].rfind("events.out.tfevents.", 0), 0u) << names[0];
  EXPECT_EQ(names[1], "metrics.jsonl");
}

TEST(MakeObservers, EachLogCanBeLeftOut) {
  dpt::testing::TempDir dir;
  const auto observers =
      make_observers(LogOptions().output_dir(dir.path()).console(nullptr).tensorboard(false));
  ASSERT_EQ(observers.size(), 1u);
  EXPECT_EQ(count<JsonlObserver>(observers), 1);
  EXPECT_EQ(file_names(dir.path()), std::vector<std::string>{"metrics.jsonl"});
}

TEST(MakeObservers, BadOptionsFailBeforeTraining) {
  dpt::testing::TempDir dir;
  EXPECT_EQ(config_error(LogOptions().print_freq(0)), "--print-freq must be at least 1, got 0");
  const fs::path file = fs::path(dir.path()) / "a_file";
  std::ofstream(file) << "x";
  const std::string error = config_error(LogOptions().output_dir(file / "run").console(nullptr));
  EXPECT_EQ(error.rfind("cannot create the metrics folder " + (file / "run").string() + ": ", 0), 0u)
      << error;
}
