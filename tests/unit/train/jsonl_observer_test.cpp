#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <limits>
#include <string>

#include "dptrain/train/logs/jsonl_observer.h"
#include "support/report_samples.h"
#include "support/file_contents.h"
#include "support/temp_dir.h"

namespace fs = std::filesystem;
using dpt::testing::file_contents;
using dpt::testing::sample_epoch;
using dpt::train::JsonlObserver;
using dpt::train::JsonlOptions;

namespace {

JsonlOptions options(const std::string& dir) {
  return JsonlOptions(dir).print_freq(5).clock([] { return 1700000000.25; });
}

// sample_step with values whose shortest decimal form is obvious.
dpt::train::StepReport step(int64_t s) {
  auto r = dpt::testing::sample_step(s, 12);
  r.loss = 3.0 - 0.25 * s;
  r.acc1 = 2.5 * s;
  return r;
}

}  // namespace

TEST(JsonlObserver, StepAndEpochRecords) {
  dpt::testing::TempDir dir;
  {
    JsonlObserver metrics(options(dir.path() + "/run"));  // the folder is created
    for (int64_t s = 1; s <= 12; ++s) metrics.on_step(step(s));
    metrics.on_epoch(sample_epoch("train", 0));
    metrics.on_epoch(sample_epoch("val", 2));
    metrics.on_finish();
  }
  EXPECT_EQ(
      file_contents(dir.path() + "/run/metrics.jsonl"),
      R"({"phase":"train_step","epoch":3,"step":1,"steps":12,"global_step":37,"loss":2.75,"acc1":2.5,"acc5":51.0,"lr":0.1,"img_per_s":345.64,"model_flop_per_s":null,"mfu":null,"eta_s":16.5,"time":1700000000.25}
{"phase":"train_step","epoch":3,"step":6,"steps":12,"global_step":42,"loss":1.5,"acc1":15.0,"acc5":56.0,"lr":0.1,"img_per_s":345.64,"model_flop_per_s":null,"mfu":null,"eta_s":9.0,"time":1700000000.25}
{"phase":"train_step","epoch":3,"step":11,"steps":12,"global_step":47,"loss":0.25,"acc1":27.5,"acc5":61.0,"lr":0.1,"img_per_s":345.64,"model_flop_per_s":null,"mfu":null,"eta_s":1.5,"time":1700000000.25}
{"phase":"train","epoch":3,"global_step":48,"loss":0.5,"acc1":40.0,"acc5":70.5,"samples":1536,"img_per_s":350.04,"model_flop_per_s":null,"mfu":null,"seconds":4.3875,"skipped_images":0,"time":1700000000.25}
{"phase":"val","epoch":3,"global_step":48,"loss":0.75,"acc1":38.25,"acc5":69.0,"samples":500,"img_per_s":1000.0,"model_flop_per_s":null,"mfu":null,"seconds":0.5,"skipped_images":2,"time":1700000000.25}
)");
}

// `dptrain eval`'s pass is in no epoch: its record has none.
TEST(JsonlObserver, AnEvaluationOfItsOwnHasNoEpoch) {
  dpt::testing::TempDir dir;
  {
    JsonlObserver metrics(options(dir.path()));
    auto pass = sample_epoch("val", 0);
    pass.standalone = true;
    metrics.on_epoch(pass);
  }
  const auto record = nlohmann::json::parse(file_contents(dir.path() + "/metrics.jsonl"));
  EXPECT_EQ(record["phase"], "val");
  EXPECT_FALSE(record.contains("epoch"));
  EXPECT_EQ(record["acc1"], 38.25);
}

TEST(JsonlObserver, NonFiniteNumbersAreNull) {
  dpt::testing::TempDir dir;
  {
    JsonlObserver metrics(options(dir.path()));
    auto r = step(1);
    r.loss = std::numeric_limits<double>::quiet_NaN();
    r.eta_s = std::numeric_limits<double>::infinity();
    metrics.on_step(r);
  }
  EXPECT_EQ(file_contents(dir.path() + "/metrics.jsonl"),
            R"({"phase":"train_step","epoch":3,"step":1,"steps":12,"global_step":37,"loss":null,"acc1":2.5,"acc5":51.0,"lr":0.1,"img_per_s":345.64,"model_flop_per_s":null,"mfu":null,"eta_s":null,"time":1700000000.25}
)");
}

TEST(JsonlObserver, ModelRateWhenCounted) {
  dpt::testing::TempDir dir;
  {
    JsonlObserver metrics(options(dir.path()));
    auto r = sample_epoch("train", 0);
    r.model_rate = {2.5e11, 0.375};
    metrics.on_epoch(r);
  }
  EXPECT_EQ(file_contents(dir.path() + "/metrics.jsonl"),
            R"({"phase":"train","epoch":3,"global_step":48,"loss":0.5,"acc1":40.0,"acc5":70.5,"samples":1536,"img_per_s":350.04,"model_flop_per_s":250000000000.0,"mfu":0.375,"seconds":4.3875,"skipped_images":0,"time":1700000000.25}
)");
}

TEST(JsonlObserver, ResumedRunAppends) {
  dpt::testing::TempDir dir;
  JsonlObserver(options(dir.path())).on_epoch(sample_epoch("train", 0));
  JsonlObserver(options(dir.path())).on_epoch(sample_epoch("val", 0));
  const std::string text = file_contents(dir.path() + "/metrics.jsonl");
  EXPECT_EQ(text.rfind(R"({"phase":"train",)", 0), 0u) << text;
  EXPECT_NE(text.find("\n{\"phase\":\"val\","), std::string::npos) << text;
  EXPECT_EQ(std::count(text.begin(), text.end(), '\n'), 2);
}

// A full disk in the middle of a run: one message, no exception, training goes on.
TEST(JsonlObserver, FullDiskDoesNotThrow) {
  dpt::testing::TempDir dir;
  fs::create_symlink("/dev/full", dir.path() + "/metrics.jsonl");
  JsonlObserver metrics(options(dir.path()));
  ::testing::internal::CaptureStderr();
  EXPECT_NO_THROW(metrics.on_step(step(1)));
  EXPECT_NO_THROW(metrics.on_epoch(sample_epoch("train", 0)));
  EXPECT_EQ(::testing::internal::GetCapturedStderr(),
            "dptrain: cannot write log file " + dir.path() +
                "/metrics.jsonl: No space left on device; training goes on without it\n");
}
