#include "dptrain/train/logs/jsonl_observer.h"

#include <nlohmann/json.hpp>

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

}  // namespace

JsonlObserver::JsonlObserver(const JsonlOptions& options)
    : print_freq_(checked_print_freq(options.print_freq())),
      clock_(options.clock()),
      file_(open_metrics(options.dir())) {}

void JsonlObserver::on_step(const StepReport& r) {
  if (!logs_step(r, print_freq_)) return;
  const nlohmann::ordered_json record = {{"phase", "train_step"},
                                         {"epoch", r.epoch},
                                         {"step", r.step_in_epoch},
                                         {"steps", r.steps_per_epoch},
                                         {"global_step", r.global_step},
                                         {"loss", r.loss},
                                         {"acc1", r.acc1},
                                         {"acc5", r.acc5},
                                         {"lr", r.lr},
                                         {"img_per_s", r.images_per_s},
                                         {"eta_s", r.eta_s},
                                         {"time", clock_()}};
  file_.write(line(record));
}

void JsonlObserver::on_epoch(const EpochReport& r) {
  const nlohmann::ordered_json record = {{"phase", r.phase},
                                         {"epoch", r.epoch},
                                         {"global_step", r.global_step},
                                         {"loss", r.loss},
                                         {"acc1", r.acc1},
                                         {"acc5", r.acc5},
                                         {"samples", r.samples},
                                         {"img_per_s", r.images_per_s},
                                         {"seconds", r.seconds},
                                         {"skipped_images", r.skipped_images},
                                         {"time", clock_()}};
  file_.write(line(record));
}

}  // namespace dpt::train
