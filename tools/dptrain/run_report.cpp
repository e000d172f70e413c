#include "run_report.h"

#include <algorithm>
#include <cctype>
#include <cerrno>
#include <cmath>
#include <cstring>
#include <fstream>
#include <limits>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "dptrain/common/error.h"
#include "dptrain/common/read_file.h"
#include "dptrain/train/logs/jsonl_observer.h"
#include "dptrain/train/logs/timeline.h"

namespace dpt::report {

using train::kMetricsFileName;
using train::name_of;
using train::step_phase_named;
using train::step_phases;
using train::StepPhase;
using train::Timeline;
using train::timeline_path;
namespace fs = std::filesystem;
using nlohmann::json;

namespace {

std::string read_text(const fs::path& path) {
  auto text = read_file<std::string>(path);
  DPT_CHECK(text, DataError, "cannot read ", path.string(), ": ", std::strerror(errno),
            "; check the run folder given to `dptrain report`");
  return std::move(*text);
}

// The integer `object[key]`, or `fallback` where there is none. nlohmann converts a number to an
// integer type with a cast, undefined where it does not fit (fuzz/report gave a timeline event a
// tid of 8.7e10): such a value is a json::exception, as a field of the wrong type is, which the
// readers below turn into a DataError naming the file and line.
template <typename Integer>
Integer integer_field(const json& object, const char* key, Integer fallback) {
  const auto found = object.find(key);
  if (found == object.end()) return fallback;
  const json& value = *found;
  using Limits = std::numeric_limits<Integer>;
  bool fits = false;
  if (value.is_number_unsigned()) {  // how the parser keeps every integer from 0 up
    fits = value.get<uint64_t>() <= static_cast<uint64_t>(Limits::max());
  } else if (value.is_number_integer()) {
    const auto number = value.get<int64_t>();
    fits = number >= static_cast<int64_t>(Limits::min()) && number <= static_cast<int64_t>(Limits::max());
  } else if (value.is_number_float()) {
    // [min, -min): -min, a power of two, is exact in a double, where max may round up to it.
    constexpr auto lowest = static_cast<double>(Limits::min());
    const double number = value.get<double>();
    fits = number >= lowest && number < -lowest && number == std::floor(number);
  }
  if (!fits) {
    throw json::out_of_range::create(406, str("'", key, "' is ", value.dump(), ", not an integer of its type"), &value);
  }
  return value.is_number_float() ? static_cast<Integer>(value.get<double>()) : value.get<Integer>();
}

// One record of metrics.jsonl into the run's points. Throws json::exception for a field of the
// wrong type.
void add_record(const json& record, RunRecords& run) {
  const std::string phase = record.value("phase", "");
  // Non-finite numbers are written as null; they are left out of the charts.
  auto add = [&record](Points& points, const char* key, double scale = 1.0) {
    if (record.contains(key) && record.at(key).is_number()) {
      points.emplace_back(record.at("global_step").get<double>(), record.at(key).get<double>() * scale);
    }
  };
  if (phase == "train_step") {
    add(run.step_loss, "loss");
    add(run.step_acc1, "acc1");
    add(run.step_lr, "lr");
    add(run.step_images_per_s, "img_per_s");
    add(run.step_mfu, "mfu", 100.0);
  } else if (phase == "train") {
    add(run.train_loss, "loss");
    add(run.train_acc1, "acc1");
    add(run.epoch_images_per_s, "img_per_s");
    add(run.epoch_mfu, "mfu", 100.0);
    if (record.contains("model_flop_per_s") && record.at("model_flop_per_s").is_number()) {
      run.last_model_flop_per_s = record.at("model_flop_per_s").get<double>();
    }
  } else if (phase == "val") {
    add(run.val_loss, "loss");
    add(run.val_acc1, "acc1");
  } else if (phase == "val_ema") {
    add(run.val_ema_acc1, "acc1");
  } else if (phase == "rank_busy" && record.contains("busy_ms_by_rank")) {
    const json& busy = record.at("busy_ms_by_rank");
    if (run.rank_busy_ms.size() < busy.size()) run.rank_busy_ms.resize(busy.size());
    for (size_t r = 0; r < busy.size(); ++r) {
      if (!busy[r].is_number()) continue;  // NaN, written as null: the rank had no step
      run.rank_busy_ms[r].emplace_back(record.at("global_step").get<double>(), busy[r].get<double>());
    }
  } else if (phase == "straggler") {
    train::StragglerReport slow;
    slow.global_step = integer_field(record, "global_step", int64_t{0});
    slow.rank = integer_field(record, "rank", 0);
    slow.host = record.value("host", "");
    slow.windows = integer_field(record, "windows", int64_t{0});
    slow.steps = integer_field(record, "steps", int64_t{0});
    slow.busy_ms = record.value("busy_ms", 0.0);
    slow.others_busy_ms = record.value("others_busy_ms", 0.0);
    slow.part = record.value("part", "");
    slow.part_ms = record.value("part_ms", 0.0);
    slow.others_part_ms = record.value("others_part_ms", 0.0);
    run.stragglers.push_back(slow);
  } else if (phase == "membership") {
    train::MembershipReport round;
    round.round = integer_field(record, "round", 0);
    round.cause = record.value("cause", "");
    round.world_size_before = integer_field(record, "world_size_before", 0);
    round.world_size = integer_field(record, "world_size", 0);
    round.resumed_step = integer_field(record, "resumed_step", int64_t{0});
    if (record.contains("last_logged_step") && !record.at("last_logged_step").is_null()) {  // null: not logged
      round.last_logged_step = integer_field(record, "last_logged_step", int64_t{0});
    }
    round.seconds = record.value("seconds", 0.0);
    run.rounds.push_back(round);
  }
}

void read_metrics(const fs::path& path, RunRecords& run) {
  std::ifstream in(path);
  DPT_CHECK(in, DataError, "no ", path.filename().string(), " in ", path.parent_path().string(),
            ": `dptrain report` reads the folder a run was given with --output");
  std::string line;
  for (int number = 1; std::getline(in, line); ++number) {
    if (line.empty()) continue;
    json record;
    try {
      record = json::parse(line);
    } catch (const json::exception& e) {
      throw DataError(str(path.string(), " line ", number, " is not JSON (", e.what(),
                          "); was the file cut short? Remove the broken line and run the report again"));
    }
    try {
      add_record(record, run);
    } catch (const json::exception& e) {
      throw DataError(str(path.string(), " line ", number, " is not a record as `dptrain train` writes them (",
                          e.what(), "); remove the line and run the report again"));
    }
  }
  // A resumed run logs again from its checkpoint on: order by step (stable, so repeats stay in
  // the order they were logged).
  std::vector<Points*> all_points{&run.step_loss, &run.step_acc1, &run.step_lr, &run.step_images_per_s,
                                  &run.step_mfu, &run.train_loss, &run.train_acc1, &run.val_loss,
                                  &run.val_acc1, &run.val_ema_acc1, &run.epoch_images_per_s, &run.epoch_mfu};
  for (Points& busy : run.rank_busy_ms) all_points.push_back(&busy);
  for (Points* points : all_points) {
    std::stable_sort(points->begin(), points->end(), [](const auto& a, const auto& b) { return a.first < b.first; });
  }
}

// A trace file; one whose run died has no closing bracket, which is supplied.
json read_trace(const fs::path& path) {
  std::string text = read_text(path);
  json trace = json::parse(text, nullptr, /*allow_exceptions=*/false);
  if (trace.is_discarded()) {
    while (!text.empty() && (std::isspace(static_cast<unsigned char>(text.back())) || text.back() == ',')) {
      text.pop_back();
    }
    trace = json::parse(text + "]", nullptr, false);
  }
  DPT_CHECK(trace.is_array(), DataError, path.string(), " is not a timeline (a JSON array of trace events) as ",
            "`dptrain train --timeline` writes");
  return trace;
}

StepBreakdown breakdown(const json& trace, int rank) {
  StepBreakdown ranked;
  ranked.rank = rank;
  double step_sum = 0, bucket_sum = 0, gradient_bytes = 0, reduced_bytes = 0;
  std::map<StepPhase, double> sums;
  for (const auto& event : trace) {
    if (event.value("ph", "") != "X") continue;
    const std::string name = event.value("name", "");
    const double ms = event.value("dur", 0.0) / 1e3;
    const int track = integer_field(event, "tid", 0);
    if (track == static_cast<int>(Timeline::Track::Communication)) {
      bucket_sum += ms;
      ++ranked.buckets;
      // Timelines before comm hooks compressed have no reduced_bytes: all was reduced.
      const json args = event.value("args", json::object());
      const double bytes = args.value("bytes", 0.0);
      gradient_bytes += bytes;
      reduced_bytes += args.value("reduced_bytes", bytes);
    } else if (name == "step") {
      step_sum += ms;
      ++ranked.steps;
    } else if (const auto phase = step_phase_named(name)) {
      sums[*phase] += ms;
    }
  }
  // Every phase has a mean, 0 in a trace without steps (the page lists each rank's phases, and a
  // rank whose trace holds no step beside one that does ended `dptrain report` when one was missing).
  for (StepPhase phase : step_phases()) ranked.parts[phase] = 0;
  if (ranked.steps == 0) return ranked;
  const auto steps = static_cast<double>(ranked.steps);
  ranked.step_ms = step_sum / steps;
  for (StepPhase phase : step_phases()) ranked.parts[phase] = sums[phase] / steps;
  if (ranked.buckets > 0) ranked.bucket_ms = bucket_sum / static_cast<double>(ranked.buckets);
  ranked.buckets /= ranked.steps;
  ranked.gradient_mb = gradient_bytes / steps / 1e6;
  ranked.reduced_mb = reduced_bytes / steps / 1e6;
  return ranked;
}

// The rows of the breakdown: each part, with backward's compute apart from its wait.
struct Row {
  std::string name;
  std::string color;
  double ms;
};

// Each phase's colour in the bars (matplotlib's tab10, as a reader of plots knows them).
const char* color_of(StepPhase phase) {
  switch (phase) {
    case StepPhase::Data: return "#8c8c8c";
    case StepPhase::CopyToDevice: return "#bcbd22";
    case StepPhase::Forward: return "#1f77b4";
    case StepPhase::Backward: return "#ff7f0e";
    case StepPhase::WaitForCommunication: return "#d62728";
    case StepPhase::Synchronize: return "#9467bd";
    case StepPhase::MetricsAllReduce: return "#e377c2";
    case StepPhase::Optimizer: return "#2ca02c";
  }
  return "#dddddd";
}

std::vector<Row> rows_of(const StepBreakdown& rank) {
  const double wait = rank.parts.at(StepPhase::WaitForCommunication);
  std::vector<Row> rows;
  for (StepPhase phase : step_phases()) {
    double ms = rank.parts.at(phase);
    std::string name(name_of(phase));
    // The wait is inside backward: the bars show backward's own compute beside it.
    if (phase == StepPhase::Backward) {
      ms -= wait;
      name = "backward compute";
    }
    rows.push_back({name, color_of(phase), ms});
  }
  double parts = 0;
  for (const auto& row : rows) parts += row.ms;
  rows.push_back({"other", "#dddddd", std::max(0.0, rank.step_ms - parts)});
  return rows;
}

std::string breakdown_section(const std::vector<StepBreakdown>& ranks) {
  if (ranks.empty()) {
    return "<p>No timeline: run <code>dptrain train</code> with <code>--timeline FILE</code> to see where each "
           "step's time goes.</p>\n";
  }
  std::string html = R"(<table id="breakdown"><tr><th>mean ms per step</th>)";
  for (const auto& rank : ranks) html += fmt::format("<th>rank {}</th>", rank.rank);
  html += "</tr>\n";
  std::vector<std::vector<Row>> rows;  // per rank, for the table and the bars
  for (const auto& rank : ranks) rows.push_back(rows_of(rank));
  for (size_t r = 0; r < rows.front().size(); ++r) {
    const Row& part = rows.front()[r];
    html += fmt::format(R"(<tr data-part="{}"><td><span class="swatch" style="background:{}"></span>{}</td>)",
                        part.name, part.color, part.name);
    for (size_t k = 0; k < ranks.size(); ++k) {
      const double ms = rows[k][r].ms;
      html += fmt::format(R"(<td data-rank="{}" data-value="{}">{:.2f}</td>)", ranks[k].rank, ms, ms);
    }
    html += "</tr>\n";
  }
  auto total_row = [&](const std::string& part, const std::string& label, auto value, int decimals) {
    html += fmt::format(R"(<tr data-part="{}" class="total"><td>{}</td>)", part, label);
    for (const auto& rank : ranks) {
      html += fmt::format(R"(<td data-rank="{}" data-value="{}">{:.{}f}</td>)", rank.rank, value(rank), value(rank),
                          decimals);
    }
    html += "</tr>\n";
  };
  total_row("step", "step", [](const StepBreakdown& r) { return r.step_ms; }, 2);
  total_row("steps", "steps timed", [](const StepBreakdown& r) { return static_cast<double>(r.steps); }, 0);
  total_row("bucket", "one bucket's all-reduce, launch to completion",
            [](const StepBreakdown& r) { return r.bucket_ms; }, 2);
  total_row("buckets", "buckets per step", [](const StepBreakdown& r) { return static_cast<double>(r.buckets); }, 0);
  total_row("gradient MB", "gradients per step (MB)", [](const StepBreakdown& r) { return r.gradient_mb; }, 3);
  total_row("reduced MB", "reduced per step (MB; less when --comm-hook compresses)",
            [](const StepBreakdown& r) { return r.reduced_mb; }, 3);
  total_row("compression", "compression (gradients / reduced)",
            [](const StepBreakdown& r) { return r.reduced_mb > 0 ? r.gradient_mb / r.reduced_mb : 1.0; }, 1);
  html += "</table>\n";

  // One stacked bar per rank, on one scale.
  constexpr double kWidth = 540, kLeft = 64, kRight = kWidth - 12, kBar = 22;
  double longest = 0;
  for (const auto& rank : ranks) longest = std::max(longest, rank.step_ms);
  if (longest <= 0) longest = 1;
  const double height = 20 + kBar * 1.5 * static_cast<double>(ranks.size());
  html += fmt::format(R"(<svg class="bars" width="{}" height="{:.0f}" data-ms-max="{}">)", kWidth, height, longest);
  for (size_t k = 0; k < ranks.size(); ++k) {
    const double y = 10 + kBar * 1.5 * static_cast<double>(k);
    html += fmt::format(R"(<text x="{}" y="{:.1f}" class="tick" text-anchor="end">rank {}</text>)", kLeft - 6,
                        y + kBar * 0.7, ranks[k].rank);
    double x = kLeft;
    for (const auto& row : rows[k]) {
      const double w = row.ms / longest * (kRight - kLeft);
      html += fmt::format(
          R"(<rect x="{:.2f}" y="{:.1f}" width="{:.2f}" height="{}" fill="{}"><title>{}: {:.2f} ms</title></rect>)", x,
          y, w, kBar, row.color, row.name, row.ms);
      x += w;
    }
  }
  return html + "</svg>\n";
}

// Each rank's busy time per step over the run, and the ranks named slow.
std::string slow_ranks_section(const RunRecords& run) {
  if (run.rank_busy_ms.empty()) return "";
  static const char* kColors[] = {"#1f77b4", "#ff7f0e", "#2ca02c", "#d62728", "#9467bd",
                                  "#8c564b", "#e377c2", "#7f7f7f", "#bcbd22", "#17becf"};
  std::vector<Series> series;
  for (size_t r = 0; r < run.rank_busy_ms.size(); ++r) {
    series.push_back({str("rank ", r), kColors[r % std::size(kColors)], &run.rank_busy_ms[r], false});
  }
  std::string html = "<h2>Slow ranks</h2>\n<div class=\"charts\">\n" +
                     line_chart("busy ms per step (without waiting for the others)", series) + "</div>\n";
  if (run.stragglers.empty()) return html + "<p id=\"stragglers\">No rank was named slow.</p>\n";
  html += "<table id=\"stragglers\"><tr><th>step</th><th>rank</th><th>host</th><th>busy ms per step</th>"
          "<th>others' median</th><th>slowest part</th><th>its ms</th><th>others'</th></tr>\n";
  for (const auto& slow : run.stragglers) {
    html += fmt::format(
        "<tr data-rank=\"{}\"><td>{}</td><td>{}</td><td>{}</td><td>{:.1f}</td><td>{:.1f}</td><td>{}</td><td>{:.1f}</td>"
        "<td>{:.1f}</td></tr>\n",
        slow.rank, slow.global_step, slow.rank, escape_html(slow.host), slow.busy_ms, slow.others_busy_ms,
        escape_html(slow.part), slow.part_ms, slow.others_part_ms);
  }
  return html + "</table>\n";
}

// The rounds after the first: what ended the one before, the world, the steps lost and the time.
std::string rounds_section(const RunRecords& run) {
  std::string html = "<h2>Restarts and re-formations</h2>\n";
  if (run.rounds.empty()) return html + "<p id=\"rounds\">The run trained in one round.</p>\n";
  html += "<table id=\"rounds\"><tr><th>round</th><th>after</th><th>processes</th><th>before</th>"
          "<th>resumed at step</th><th>steps lost</th><th>seconds</th></tr>\n";
  for (const auto& round : run.rounds) {
    html += fmt::format(
        "<tr data-round=\"{}\"><td>{}</td><td>{}</td><td>{}</td><td>{}</td><td>{}</td><td>{}</td><td>{:.1f}</td></tr>\n",
        round.round, round.round, escape_html(round.cause), round.world_size,
        round.world_size_before > 0 ? std::to_string(round.world_size_before) : "no checkpoint", round.resumed_step,
        round.last_logged_step ? std::to_string(round.steps_lost()) : "?", round.seconds);
  }
  return html + "</table>\n";
}

const char* kStyle = R"(body{font-family:sans-serif;margin:24px;color:#222;max-width:1180px}
h1{font-size:20px}h2{font-size:16px;margin-top:28px}
.charts{display:flex;flex-wrap:wrap;gap:12px}
svg.chart,svg.bars{background:#fff;border:1px solid #ddd}
.grid{stroke:#eee}.series{fill:none;stroke-width:1.8}
.tick{font-size:11px;fill:#555}.title{font-size:13px;font-weight:bold}.legend{font-size:12px}
table{border-collapse:collapse;margin:8px 0}td,th{border:1px solid #ddd;padding:3px 10px;text-align:right}
td:first-child{text-align:left}tr.total td{font-weight:bold}
.swatch{display:inline-block;width:10px;height:10px;margin-right:6px})";

}  // namespace

RunRecords read_run(const RunFiles& files) {
  RunRecords run;
  run.dir = files.dir();
  read_metrics(files.dir() / kMetricsFileName, run);
  const fs::path timeline = files.timeline().value_or(files.dir() / "timeline.json");
  DPT_CHECK(!files.timeline() || fs::exists(timeline_path(timeline, 0)), DataError, "no ",
            timeline_path(timeline, 0).string(), ": --timeline names the path given to `dptrain train --timeline`, ",
            "whose rank 0 file is that");
  for (int rank = 0; fs::exists(timeline_path(timeline, rank)); ++rank) {
    const fs::path path = timeline_path(timeline, rank);
    try {
      run.ranks.push_back(breakdown(read_trace(path), rank));
    } catch (const json::exception& e) {
      throw DataError(str(path.string(), " holds an event that is not one `dptrain train --timeline` writes (",
                          e.what(), ")"));
    }
  }
  return run;
}

std::string render_report(const RunRecords& run) {
  const std::string title = "dptrain run " + run.dir.string();
  std::string html = "<!DOCTYPE html>\n<html lang=\"en\"><head><meta charset=\"utf-8\"><title>" + escape_html(title) +
                     "</title>\n<style>" + kStyle + "</style></head><body>\n";
  html += "<h1>" + escape_html(title) + "</h1>\n<p class=\"summary\">";
  html += fmt::format("{} logged steps, {} epoch(s)", run.step_loss.size(), run.val_acc1.size());
  if (!run.val_acc1.empty()) {
    double best = 0;
    for (const auto& point : run.val_acc1) best = std::max(best, point.second);
    html += fmt::format(
        R"(; last validation top-1 <b id="last-val-acc1">{:.2f}%</b>, best <b id="best-val-acc1">{:.2f}%</b>)",
        run.val_acc1.back().second, best);
  }
  if (run.last_model_flop_per_s > 0) {
    html += fmt::format(R"(; model <b id="model-gflops">{:.0f} GFLOP/s</b> in the last training pass)",
                        run.last_model_flop_per_s / 1e9);
    if (!run.epoch_mfu.empty()) {
      html += fmt::format(R"(, <b id="mfu">{:.0f}%</b> of the measured peak (MFU))", run.epoch_mfu.back().second);
    }
  }
  html += ".</p>\n<h2>Training</h2>\n<div class=\"charts\">\n";
  html += line_chart("loss", {{"train (logged steps)", "#1f77b4", &run.step_loss, false},
                              {"train (epoch)", "#ff7f0e", &run.train_loss, true},
                              {"validation", "#2ca02c", &run.val_loss, true}});
  html += line_chart("top-1 (%)", {{"train (logged steps)", "#1f77b4", &run.step_acc1, false},
                                   {"train (epoch)", "#ff7f0e", &run.train_acc1, true},
                                   {"validation", "#2ca02c", &run.val_acc1, true},
                                   {"validation (EMA)", "#9467bd", &run.val_ema_acc1, true}},
                     YAxis::Percent);
  html += line_chart("learning rate", {{"learning rate", "#d62728", &run.step_lr, false}});
  html += line_chart("images/s (all ranks)", {{"logged steps", "#1f77b4", &run.step_images_per_s, false},
                                              {"epoch", "#ff7f0e", &run.epoch_images_per_s, true}});
  if (!run.step_mfu.empty() || !run.epoch_mfu.empty()) {
    html += line_chart("model FLOP/s (% of the measured peak)", {{"logged steps", "#1f77b4", &run.step_mfu, false},
                                                                {"epoch", "#ff7f0e", &run.epoch_mfu, true}},
                       YAxis::Percent);
  }
  html += "</div>\n<h2>Where a step's time goes</h2>\n" + breakdown_section(run.ranks);
  html += slow_ranks_section(run);
  html += rounds_section(run);
  return html + "</body></html>\n";
}

}  // namespace dpt::report
