#include "dptrain/train/logs/jsonl_observer.h"

#include <nlohmann/json.hpp>

#include <algorithm>
#include <fstream>

#include "dptrain/common/error.h"

namespace dpt::train {
namespace fs = std::filesystem;
namespace {

LogFile open_metrics(const fs::path& dir) {
  std::error_code error;
  fs::create_directories(dir, error);
  DPT_CHECK(!error, ConfigError, "cannot create the metrics folder ", dir.string(), ": ",
            error.message(), "; check the output path and its permissions");
  return LogFile::append(dir / kMetricsFileName);
}

std::string line(const nlohmann::ordered_json& record) {
  // The phase is the only text, and it comes from the trainer; replacing invalid UTF-8 keeps a
  // bad byte from throwing out of the training loop.
  return record.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace) + "\n";
}

// The fields every record has, after its position in the epoch.
void add_scores(nlohmann::ordered_json& record, const Report& r) {
  record["global_step"] = r.global_step;
  record["loss"] = r.loss;
  record["acc1"] = r.acc1;
  record["acc5"] = r.acc5;
}

// Null when not known, so that a reader tells "not counted" from zero.
void add_model_rate(nlohmann::ordered_json& record, const ModelRate& rate) {
  record["model_flop_per_s"] = rate.flop_per_s > 0 ? nlohmann::ordered_json(rate.flop_per_s) : nullptr;
  record["mfu"] = rate.mfu ? nlohmann::ordered_json(*rate.mfu) : nullptr;
}

}  // namespace

std::optional<int64_t> last_logged_step(const fs::path& dir) {
  std::ifstream in(dir / kMetricsFileName);
  std::optional<int64_t> last;
  std::string text;
  while (std::getline(in, text)) {
    const auto record = nlohmann::json::parse(text, nullptr, /*allow_exceptions=*/false);
    if (!record.is_object() || record.value("phase", "") != "train_step") continue;
    const auto step = record.find("global_step");
    if (step == record.end() || !step->is_number_integer()) continue;
    last = std::max(last.value_or(0), step->get<int64_t>());
  }
  return last;
}

JsonlObserver::JsonlObserver(const JsonlOptions& options)
    : PeriodicObserver(options.print_freq()), clock_(options.clock()), file_(open_metrics(options.dir())) {}

void JsonlObserver::log_step(const StepReport& r) {
  nlohmann::ordered_json record = {
      {"phase", "train_step"}, {"epoch", r.epoch}, {"step", r.step_in_epoch}, {"steps", r.steps_per_epoch}};
  add_scores(record, r);
  record["lr"] = r.lr;
  record["img_per_s"] = r.images_per_s;
  add_model_rate(record, r.model_rate);
  record["eta_s"] = r.eta_s;
  record["time"] = clock_();
  file_.write(line(record));
}

void JsonlObserver::on_epoch(const EpochReport& r) {
  nlohmann::ordered_json record = {{"phase", r.phase}};
  if (!r.standalone) record["epoch"] = r.epoch;
  add_scores(record, r);
  record["samples"] = r.samples;
  record["img_per_s"] = r.images_per_s;
  add_model_rate(record, r.model_rate);
  record["seconds"] = r.seconds;
  record["skipped_images"] = r.skipped_images;
  record["time"] = clock_();
  file_.write(line(record));
}

void JsonlObserver::on_rank_busy(int64_t global_step, const std::vector<double>& busy_ms_by_rank) {
  nlohmann::ordered_json record = {
      {"phase", "rank_busy"}, {"global_step", global_step}, {"busy_ms_by_rank", busy_ms_by_rank}};
  record["time"] = clock_();
  file_.write(line(record));
}

void JsonlObserver::on_straggler(const StragglerReport& r) {
  nlohmann::ordered_json record = {{"phase", "straggler"},      {"global_step", r.global_step},
                                   {"rank", r.rank},             {"host", r.host},
                                   {"windows", r.windows},       {"steps", r.steps},
                                   {"busy_ms", r.busy_ms},
                                   {"others_busy_ms", r.others_busy_ms}, {"part", r.part},
                                   {"part_ms", r.part_ms},       {"others_part_ms", r.others_part_ms},
                                   {"busy_ms_by_rank", r.busy_ms_by_rank}};
  record["time"] = clock_();
  file_.write(line(record));
}

void JsonlObserver::on_membership(const MembershipReport& r) {
  nlohmann::ordered_json record = {{"phase", "membership"},
                                   {"round", r.round},
                                   {"cause", r.cause},
                                   {"world_size_before", r.world_size_before},
                                   {"world_size", r.world_size},
                                   {"resumed_step", r.resumed_step},
                                   {"last_logged_step", r.last_logged_step ? nlohmann::ordered_json(*r.last_logged_step)
                                                                           : nlohmann::ordered_json(nullptr)},
                                   {"steps_lost", r.steps_lost()},
                                   {"seconds", r.seconds}};
  record["time"] = clock_();
  file_.write(line(record));
}

}  // namespace dpt::train
