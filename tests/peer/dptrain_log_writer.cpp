// Feeds reports read from stdin to make_observers() for test_tensorboard_events.py, which then
// reads the files back with its own parsers (built with the tests, not installed).
//
//   dptrain_log_writer <output dir> <print freq>  < reports.jsonl
//
// One JSON object per input line: {"step": {StepReport fields}} or {"epoch": {EpochReport fields}},
// with the field names of report.h. The console display goes to stdout as plain lines.
// Exit status 1 with "error: <message>" on stderr for any dptrain error.

#include <iostream>
#include <string>

#include <nlohmann/json.hpp>

#include "dptrain/common/error.h"
#include "dptrain/train/logs/observers.h"

namespace train = dpt::train;

namespace {

train::StepReport step_report(const nlohmann::json& j) {
  train::StepReport r;
  r.epoch = j.at("epoch");
  r.step_in_epoch = j.at("step_in_epoch");
  r.steps_per_epoch = j.at("steps_per_epoch");
  r.global_step = j.at("global_step");
  r.loss = j.at("loss");
  r.acc1 = j.at("acc1");
  r.acc5 = j.at("acc5");
  r.lr = j.at("lr");
  r.images_per_s = j.at("images_per_s");
  r.eta_s = j.at("eta_s");
  return r;
}

train::EpochReport epoch_report(const nlohmann::json& j) {
  train::EpochReport r;
  r.phase = j.at("phase");
  r.epoch = j.at("epoch");
  r.global_step = j.at("global_step");
  r.loss = j.at("loss");
  r.acc1 = j.at("acc1");
  r.acc5 = j.at("acc5");
  r.samples = j.at("samples");
  r.images_per_s = j.at("images_per_s");
  r.seconds = j.at("seconds");
  r.skipped_images = j.at("skipped_images");
  return r;
}

}  // namespace

int main(int argc, char** argv) {
  if (argc != 3) {
    std::cerr << "usage: dptrain_log_writer <output dir> <print freq> < reports.jsonl\n";
    return 2;
  }
  try {
    const auto observers = train::make_observers(
        train::LogOptions().output_dir(argv[1]).print_freq(std::stoll(argv[2])).interactive(false));
    std::string line;
    while (std::getline(std::cin, line)) {
      const nlohmann::json input = nlohmann::json::parse(line);
      for (const auto& observer : observers) {
        if (input.contains("step")) observer->on_step(step_report(input["step"]));
        if (input.contains("epoch")) observer->on_epoch(epoch_report(input["epoch"]));
      }
    }
    for (const auto& observer : observers) observer->on_finish();
  } catch (const std::exception& e) {
    std::cerr << "error: " << e.what() << "\n";
    return 1;
  }
  return 0;
}
