#include <gtest/gtest.h>

#include <chrono>
#include <filesystem>
#include <fstream>
#include <limits>
#include <string>

#include "dptrain/common/error.h"
#include "run_report.h"
#include "dptrain/train/logs/timeline.h"
#include "support/error_of.h"
#include "support/temp_dir.h"

namespace fs = std::filesystem;
using dpt::report::RunFiles;
using dpt::train::StepPhase;
using dpt::train::Timeline;

namespace {

void write(const fs::path& path, const std::string& text) { std::ofstream(path, std::ios::binary) << text; }

const char* kMetrics =
    R"({"phase":"train_step","epoch":0,"step":1,"steps":2,"global_step":1,"loss":2.5,"acc1":10.0,"acc5":50.0,"lr":0.1,"img_per_s":100.0,"eta_s":1.0,"time":1.0}
{"phase":"train","epoch":0,"global_step":2,"loss":2.0,"acc1":20.0,"acc5":60.0,"samples":64,"img_per_s":90.0,"seconds":0.7,"skipped_images":0,"time":2.0}
{"phase":"val","epoch":0,"global_step":2,"loss":1.5,"acc1":40.0,"acc5":80.0,"samples":32,"img_per_s":300.0,"seconds":0.1,"skipped_images":0,"time":3.0}
{"phase":"train_step","epoch":1,"step":1,"steps":2,"global_step":3,"loss":null,"acc1":30.0,"acc5":70.0,"lr":0.01,"img_per_s":110.0,"eta_s":1.0,"time":4.0}
)";

// Rank `rank`'s timeline of two steps: each 10 ms, 4 ms of it forward and 5 ms backward, of
// which `wait_ms` waiting for communication, with two buckets of 1 and 3 ms.
void write_timeline(const fs::path& trace, int rank, double wait_ms) {
  using std::chrono::microseconds;
  Timeline timeline(dpt::train::timeline_path(trace, rank), rank);
  const auto t0 = Timeline::Clock::now();
  for (int step = 0; step < 2; ++step) {
    const auto begin = t0 + microseconds(10'000 * step);
    const dpt::train::TimelineArgs at = {{"step", step + 1}};
    timeline.on_phase(StepPhase::Forward, begin, begin + microseconds(4000), step + 1);
    timeline.on_phase(StepPhase::Backward, begin + microseconds(4000), begin + microseconds(9000), step + 1);
    const auto wait = microseconds(static_cast<int64_t>(wait_ms * 1000));
    timeline.on_phase(StepPhase::WaitForCommunication, begin + microseconds(9000) - wait, begin + microseconds(9000),
                      step + 1);
    const auto comm = Timeline::Track::Communication;
    timeline.add(comm, "bucket 0", begin + microseconds(5000), begin + microseconds(6000), at);
    timeline.add(comm, "bucket 1", begin + microseconds(6000), begin + microseconds(9000), at);
    timeline.add(Timeline::Track::Training, "step", begin, begin + microseconds(10'000), at);
  }
}

}  // namespace

TEST(RunReport, ReadsTheMetricsByStepAndEpochLeavingOutNonFiniteValues) {
  dpt::testing::TempDir dir;
  write(fs::path(dir.path()) / "metrics.jsonl", kMetrics);
  const auto run = dpt::report::read_run(RunFiles(dir.path()));
  EXPECT_EQ(run.step_loss, (dpt::report::Points{{1, 2.5}}));  // step 3's null loss is left out
  EXPECT_EQ(run.step_acc1, (dpt::report::Points{{1, 10.0}, {3, 30.0}}));
  EXPECT_EQ(run.step_lr, (dpt::report::Points{{1, 0.1}, {3, 0.01}}));
  EXPECT_EQ(run.train_loss, (dpt::report::Points{{2, 2.0}}));
  EXPECT_EQ(run.val_acc1, (dpt::report::Points{{2, 40.0}}));
  EXPECT_EQ(run.epoch_images_per_s, (dpt::report::Points{{2, 90.0}}));
  EXPECT_TRUE(run.ranks.empty());
  const std::string page = dpt::report::render_report(run);
  EXPECT_NE(page.find(R"(id="last-val-acc1">40.00%)"), std::string::npos);
  EXPECT_NE(page.find("--timeline FILE"), std::string::npos);  // says how to get the breakdown
  EXPECT_EQ(page.find("<script"), std::string::npos);
  EXPECT_EQ(page.find("http"), std::string::npos);  // nothing fetched
}

// A run with a measured peak: MFU in percent, step and epoch, and the last pass's model FLOP/s in
// the summary; a run without one (kMetrics) has no utilisation chart.
TEST(RunReport, ShowsModelFlopsAndMfuWhenTheRunCountedThem) {
  dpt::testing::TempDir dir;
  write(fs::path(dir.path()) / "metrics.jsonl",
        R"({"phase":"train_step","epoch":0,"step":1,"steps":2,"global_step":1,"loss":2.5,"acc1":10.0,"acc5":50.0,"lr":0.1,"img_per_s":100.0,"model_flop_per_s":3.5e11,"mfu":0.625,"eta_s":1.0,"time":1.0}
{"phase":"train","epoch":0,"global_step":2,"loss":2.0,"acc1":20.0,"acc5":60.0,"samples":64,"img_per_s":90.0,"model_flop_per_s":3.15e11,"mfu":0.5625,"seconds":0.7,"skipped_images":0,"time":2.0}
)");
  const auto run = dpt::report::read_run(RunFiles(dir.path()));
  EXPECT_EQ(run.step_mfu, (dpt::report::Points{{1, 62.5}}));
  EXPECT_EQ(run.epoch_mfu, (dpt::report::Points{{2, 56.25}}));
  const std::string page = dpt::report::render_report(run);
  EXPECT_NE(page.find(R"(id="model-gflops">315 GFLOP/s)"), std::string::npos);
  EXPECT_NE(page.find(R"(id="mfu">56%)"), std::string::npos);
  EXPECT_NE(page.find("% of the measured peak"), std::string::npos);

  dpt::testing::TempDir plain;
  write(fs::path(plain.path()) / "metrics.jsonl", kMetrics);
  const std::string without = dpt::report::render_report(dpt::report::read_run(RunFiles(plain.path())));
  EXPECT_EQ(without.find("measured peak"), std::string::npos);
  EXPECT_EQ(without.find("model-gflops"), std::string::npos);
}

// A restarted run's rounds: what ended the round before, where it resumed and what it lost; a
// run of one round says so.
TEST(RunReport, ListsTheRoundsAfterARestart) {
  dpt::testing::TempDir dir;
  write(fs::path(dir.path()) / "metrics.jsonl",
        std::string(kMetrics) +
            R"({"phase":"membership","round":1,"cause":"rank 1 was killed by signal 9 <Killed>","world_size_before":2,"world_size":2,"resumed_step":20,"last_logged_step":27,"steps_lost":7,"seconds":1.26,"time":5.0}
{"phase":"membership","round":2,"cause":"a node failed","world_size_before":0,"world_size":1,"resumed_step":0,"last_logged_step":null,"steps_lost":0,"seconds":3.0,"time":6.0}
)");
  const auto run = dpt::report::read_run(RunFiles(dir.path()));
  ASSERT_EQ(run.rounds.size(), 2u);
  EXPECT_EQ(run.rounds[0].steps_lost(), 7);
  EXPECT_FALSE(run.rounds[1].last_logged_step.has_value());
  const std::string page = dpt::report::render_report(run);
  EXPECT_NE(page.find("<tr data-round=\"1\"><td>1</td><td>rank 1 was killed by signal 9 &lt;Killed&gt;</td><td>2</td>"
                      "<td>2</td><td>20</td><td>7</td><td>1.3</td></tr>"),
            std::string::npos)
      << page;
  EXPECT_NE(page.find("<tr data-round=\"2\"><td>2</td><td>a node failed</td><td>1</td><td>no checkpoint</td><td>0</td>"
                      "<td>?</td><td>3.0</td></tr>"),
            std::string::npos);

  dpt::testing::TempDir plain;
  write(fs::path(plain.path()) / "metrics.jsonl", kMetrics);
  const std::string one_round = dpt::report::render_report(dpt::report::read_run(RunFiles(plain.path())));
  EXPECT_NE(one_round.find(R"(<p id="rounds">The run trained in one round.</p>)"), std::string::npos);
}

TEST(RunReport, BreaksEachRanksMeanStepIntoItsParts) {
  dpt::testing::TempDir dir;
  write(fs::path(dir.path()) / "metrics.jsonl", kMetrics);
  const fs::path trace = fs::path(dir.path()) / "traces" / "t.json";
  write_timeline(trace, 0, 1.0);
  write_timeline(trace, 1, 2.5);
  const auto run = dpt::report::read_run(RunFiles(dir.path()).timeline(trace));
  ASSERT_EQ(run.ranks.size(), 2u);
  for (const auto& rank : run.ranks) {
    EXPECT_EQ(rank.steps, 2);
    EXPECT_NEAR(rank.step_ms, 10.0, 1e-6);
    EXPECT_NEAR(rank.parts.at(StepPhase::Forward), 4.0, 1e-6);
    EXPECT_NEAR(rank.parts.at(StepPhase::Backward), 5.0, 1e-6);
    EXPECT_NEAR(rank.parts.at(StepPhase::WaitForCommunication), rank.rank == 0 ? 1.0 : 2.5, 1e-6);
    EXPECT_EQ(rank.parts.at(StepPhase::Optimizer), 0.0);  // absent parts count as none
    EXPECT_EQ(rank.buckets, 2);
    EXPECT_NEAR(rank.bucket_ms, 2.0, 1e-6);
  }
  const std::string page = dpt::report::render_report(run);
  EXPECT_NE(page.find(R"(<tr data-part="backward compute">)"), std::string::npos);
  EXPECT_NE(page.find(R"(<td data-rank="1" data-value="2.5">2.50</td>)"), std::string::npos);  // rank 1's wait

  // A rank whose trace holds no step yet (found by fuzz/report: the page's table ended the program).
  write(trace.parent_path() / "t.rank1.json", "[{\"ph\":\"X\",\"name\":\"forward\",\"tid\":1,\"dur\":5}]");
  const auto uneven = dpt::report::read_run(RunFiles(dir.path()).timeline(trace));
  ASSERT_EQ(uneven.ranks.size(), 2u);
  EXPECT_EQ(uneven.ranks[1].steps, 0);
  EXPECT_EQ(uneven.ranks[1].parts.at(StepPhase::Forward), 0.0);
  EXPECT_NE(dpt::report::render_report(uneven).find(R"(<td data-rank="1" data-value="0">)"), std::string::npos);
}

TEST(RunReport, IntegerFieldsAreReadExactlyToTheEndsOfTheirTypes) {
  dpt::testing::TempDir dir;
  write(fs::path(dir.path()) / "metrics.jsonl",
        std::string(kMetrics) + "{\"phase\":\"straggler\",\"rank\":-2147483648,\"steps\":9223372036854775807,"
                                "\"windows\":-9223372036854775808,\"global_step\":4e3}\n");
  const auto run = dpt::report::read_run(RunFiles(dir.path()));
  ASSERT_EQ(run.stragglers.size(), 1u);
  EXPECT_EQ(run.stragglers[0].rank, std::numeric_limits<int>::min());
  EXPECT_EQ(run.stragglers[0].steps, std::numeric_limits<int64_t>::max());  // 2^63 - 1 is no double
  EXPECT_EQ(run.stragglers[0].windows, std::numeric_limits<int64_t>::min());
  EXPECT_EQ(run.stragglers[0].global_step, 4000);
}

TEST(RunReport, MissingOrBrokenFilesAreDataErrorsThatSayWhatToDo) {
  dpt::testing::TempDir dir;
  const auto missing = dpt::testing::error_of<dpt::DataError>([&] { dpt::report::read_run(RunFiles(dir.path())); });
  EXPECT_NE(missing.find("no metrics.jsonl in " + dir.path()), std::string::npos) << missing;
  EXPECT_NE(missing.find("--output"), std::string::npos) << missing;

  write(fs::path(dir.path()) / "metrics.jsonl", std::string(kMetrics) + "{\"phase\":\"val\",\"epo\n");
  const auto broken = dpt::testing::error_of<dpt::DataError>([&] { dpt::report::read_run(RunFiles(dir.path())); });
  EXPECT_NE(broken.find("metrics.jsonl line 5 is not JSON"), std::string::npos) << broken;
  // JSON, but not a record (found by fuzz/report: a field of another type ended the program).
  for (const std::string line : {"{\"phase\":\"train_step\",\"global_step\":null,\"loss\":1}", "[1]",
                                 "{\"phase\":7}", "{\"phase\":\"rank_busy\",\"global_step\":3,\"busy_ms_by_rank\":2}",
                                 // An integer field out of its type's range (converting it is undefined).
                                 "{\"phase\":\"straggler\",\"rank\":8.7e10}", "{\"phase\":\"straggler\",\"steps\":1e300}",
                                 "{\"phase\":\"straggler\",\"rank\":1.5}",
                                 "{\"phase\":\"straggler\",\"steps\":9223372036854775808}",
                                 "{\"phase\":\"straggler\",\"rank\":-2147483649}"}) {
    write(fs::path(dir.path()) / "metrics.jsonl", std::string(kMetrics) + line + "\n");
    const auto wrong = dpt::testing::error_of<dpt::DataError>([&] { dpt::report::read_run(RunFiles(dir.path())); });
    EXPECT_NE(wrong.find("metrics.jsonl line 5 is not a record as `dptrain train` writes them ("), std::string::npos)
        << line << ": " << wrong;
  }
  write(fs::path(dir.path()) / "metrics.jsonl", kMetrics);
  for (const std::string trace : {"[{\"ph\":\"X\",\"name\":\"step\",\"dur\":\"long\"}]",
                                  "[{\"ph\":\"X\",\"name\":\"step\",\"dur\":1,\"tid\":87366867829.834}]"}) {
    write(fs::path(dir.path()) / "timeline.rank0.json", trace);
    const auto event = dpt::testing::error_of<dpt::DataError>([&] { dpt::report::read_run(RunFiles(dir.path())); });
    EXPECT_NE(event.find("timeline.rank0.json holds an event that is not one `dptrain train --timeline` writes"),
              std::string::npos)
        << trace << ": " << event;
  }
  fs::remove(fs::path(dir.path()) / "timeline.rank0.json");

  write(fs::path(dir.path()) / "metrics.jsonl", kMetrics);
  const auto no_trace = dpt::testing::error_of<dpt::DataError>(
      [&] { dpt::report::read_run(RunFiles(dir.path()).timeline(dir.path() + "/t.json")); });
  EXPECT_NE(no_trace.find("no " + dir.path() + "/t.rank0.json"), std::string::npos) << no_trace;
}

namespace {

// The labels of one chart's ticks on axis `axis` ("x" or "y"), in the page's order.
std::vector<std::string> tick_labels(const std::string& page, const std::string& title, const std::string& axis) {
  const size_t chart = page.find("data-title=\"" + title + "\"");
  const size_t end = page.find("</svg>", chart);
  std::vector<std::string> labels;
  const std::string marker = "class=\"tick " + axis + "\" text-anchor=\"";
  for (size_t at = page.find(marker, chart); at < end; at = page.find(marker, at + 1)) {
    const size_t open = page.find('>', at) + 1;
    labels.push_back(page.substr(open, page.find('<', open) - open));
  }
  return labels;
}

}  // namespace

TEST(RunReport, AxesHaveTicksAtRoundNumbersAndTopOneRunsFromZeroToAHundred) {
  dpt::report::RunRecords run;
  run.step_loss = {{1, 0.631}, {250, 1.89}};                 // the raw quarters were 0.631, 1.26, 1.89
  run.step_acc1 = {{1, 12.0}, {250, 98.4}};                  // a top-1 axis once ran to 103
  run.step_images_per_s = {{1, 1221.0}, {250, 1164.0}};      // "1.22e+03"
  run.step_lr = {{1, 0.0004}, {250, 0.0021}};
  const std::string page = dpt::report::render_report(run);
  using Labels = std::vector<std::string>;
  EXPECT_EQ(tick_labels(page, "loss", "y"), (Labels{"0.0", "0.5", "1.0", "1.5", "2.0"}));
  EXPECT_EQ(tick_labels(page, "top-1 (%)", "y"), (Labels{"0", "20", "40", "60", "80", "100"}));
  EXPECT_EQ(tick_labels(page, "images/s (all ranks)", "y"), (Labels{"0", "250", "500", "750", "1000", "1250"}));
  EXPECT_EQ(tick_labels(page, "learning rate", "y"), (Labels{"0.0000", "0.0005", "0.0010", "0.0015", "0.0020", "0.0025"}));
  EXPECT_EQ(tick_labels(page, "loss", "x"), (Labels{"0", "50", "100", "150", "200", "250"}));
  // A line series of a single point is drawn as a dot (a polyline of one vertex draws nothing).
  run.step_lr = {{1, 0.0004}};
  const std::string single = dpt::report::render_report(run);
  EXPECT_NE(single.find("<title>learning rate at step 1: 0.0004</title>"), std::string::npos);
  EXPECT_EQ(page.find("<title>learning rate at step 1: "), std::string::npos);  // two points: a line alone
  // The axis ends where its last tick is, and every point lies inside it.
  EXPECT_NE(page.find(R"x(data-title="top-1 (%)" data-x-min="0" data-x-max="250" data-y-min="0" data-y-max="100")x"),
            std::string::npos);
}
