#include <gtest/gtest.h>

#include <chrono>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <map>
#include <set>
#include <string>

#include <nlohmann/json.hpp>

#include "dptrain/common/error.h"
#include "dptrain/train/logs/timeline.h"
#include "support/file_contents.h"
#include "support/temp_dir.h"

namespace fs = std::filesystem;
using dpt::testing::file_contents;
using dpt::train::Timeline;
using nlohmann::json;

namespace {

// The spans ("X" events) of a trace, in file order.
std::vector<json> spans(const json& trace) {
  std::vector<json> found;
  for (const auto& event : trace) {
    if (event["ph"] == "X") found.push_back(event);
  }
  return found;
}

}  // namespace

TEST(Timeline, EveryRankHasAFileOfItsOwn) {
  EXPECT_EQ(dpt::train::timeline_path("runs/trace.json", 3), fs::path("runs/trace.rank3.json"));
  EXPECT_EQ(dpt::train::timeline_path("trace", 0), fs::path("trace.rank0"));
}

TEST(Timeline, WritesAClosedJsonArrayOfNamedTracksAndTimedSpans) {
  dpt::testing::TempDir dir;
  const fs::path path = fs::path(dir.path()) / "sub" / "trace.rank2.json";  // the folder is created
  const auto begin = Timeline::Clock::now();
  {
    Timeline timeline(path, 2);
    timeline.add(Timeline::Track::Communication, "bucket 0", begin, begin + std::chrono::microseconds(1500),
                 {{"step", 7}, {"bytes", 4096}});
    { dpt::train::StepPhaseTimer forward(&timeline, dpt::train::StepPhase::Forward, 7); }
    timeline.flush();
  }
  const json trace = json::parse(file_contents(path));  // throws unless the array is closed
  ASSERT_TRUE(trace.is_array());
  int names = 0;
  for (const auto& event : trace) {
    EXPECT_EQ(event["pid"], 2);
    if (event["ph"] == "M" && event["name"] == "thread_name") {
      const std::map<int, std::string> tracks{{1, "training"}, {2, "communication"}, {3, "checkpoint writer"}};
      EXPECT_EQ(event["args"]["name"], tracks.at(event["tid"].get<int>()));
      ++names;
    }
    if (event["ph"] == "M" && event["name"] == "process_name") {
      EXPECT_EQ(event["args"]["name"], "rank 2");
    }
  }
  EXPECT_EQ(names, 3);
  const auto timed = spans(trace);
  ASSERT_EQ(timed.size(), 2u);
  EXPECT_EQ(timed[0]["name"], "bucket 0");
  EXPECT_EQ(timed[0]["tid"], 2);
  EXPECT_NEAR(timed[0]["dur"].get<double>(), 1500.0, 0.01);
  EXPECT_EQ(timed[0]["args"], json({{"step", 7}, {"bytes", 4096}}));
  // Microseconds of the steady clock.
  const double begin_us = std::chrono::duration<double, std::micro>(begin.time_since_epoch()).count();
  EXPECT_NEAR(timed[0]["ts"].get<double>(), begin_us, 0.01);
  EXPECT_EQ(timed[1]["name"], "forward");
  EXPECT_EQ(timed[1]["tid"], 1);
  EXPECT_EQ(timed[1]["args"], json({{"step", 7}}));
  EXPECT_GE(timed[1]["ts"].get<double>(), timed[0]["ts"].get<double>());
}

// A resumed run continues its trace: one array with both runs' spans, whether the first run
// closed its file or died without closing it.
TEST(Timeline, AResumedRunContinuesTheSameArray) {
  dpt::testing::TempDir dir;
  const fs::path path = fs::path(dir.path()) / "trace.rank0.json";
  const auto now = Timeline::Clock::now();
  for (const char* name : {"first", "second"}) {
    Timeline timeline(path, 0);
    timeline.add(Timeline::Track::Training, name, now, now);
  }
  auto names_in = [](const json& trace) {
    std::vector<std::string> names;
    for (const auto& span : spans(trace)) names.push_back(span["name"]);
    return names;
  };
  EXPECT_EQ(names_in(json::parse(file_contents(path))), (std::vector<std::string>{"first", "second"}));

  // A run that died: its file ends after an event, with no closing bracket.
  std::string cut = file_contents(path);
  cut.resize(cut.rfind(']'));
  std::ofstream(path, std::ios::binary | std::ios::trunc) << cut;
  { Timeline(path, 0).add(Timeline::Track::Training, "third", now, now); }
  EXPECT_EQ(names_in(json::parse(file_contents(path))), (std::vector<std::string>{"first", "second", "third"}));
}

TEST(Timeline, AnUnwritableFolderIsAConfigError) {
  dpt::testing::TempDir dir;
  const fs::path file = fs::path(dir.path()) / "a-file";
  std::ofstream(file) << "x";
  EXPECT_THROW(Timeline(file / "trace.json", 0), dpt::ConfigError);
}

TEST(StepPhase, EveryPhaseHasADistinctNameThatReadsBack) {
  using dpt::train::StepPhase;
  std::set<std::string> names;
  for (StepPhase phase : dpt::train::step_phases()) {
    const std::string name(dpt::train::name_of(phase));
    EXPECT_TRUE(names.insert(name).second) << name;
    EXPECT_EQ(dpt::train::step_phase_named(name), phase) << name;
  }
  EXPECT_EQ(names.size(), 8u);
  EXPECT_EQ(dpt::train::name_of(StepPhase::WaitForCommunication), "wait for communication");  // the trace's name
  EXPECT_FALSE(dpt::train::step_phase_named("step").has_value());
  EXPECT_FALSE(dpt::train::step_phase_named("bucket 0").has_value());
}
