#include "dptrain/train/logs/tensorboard_observer.h"

namespace dpt::train {

TensorBoardObserver::TensorBoardObserver(const TensorBoardOptions& options)
    : PeriodicObserver(options.print_freq()), writer_(options.writer()) {}

void TensorBoardObserver::add_scores(const std::string& section, const Report& r) {
  writer_.add_scalar(section + "loss", r.loss, r.global_step);
  writer_.add_scalar(section + "acc1", r.acc1, r.global_step);
  writer_.add_scalar(section + "acc5", r.acc5, r.global_step);
}

void TensorBoardObserver::log_step(const StepReport& r) {
  add_scores("train/", r);
  writer_.add_scalar("train/lr", r.lr, r.global_step);
  writer_.add_scalar("train/img_per_s", r.images_per_s, r.global_step);
}

void TensorBoardObserver::on_epoch(const EpochReport& r) {
  // A train pass's means would collide with the step curves of the same name.
  const std::string section = r.phase == "train" ? "train_epoch/" : r.phase + "/";
  add_scores(section, r);
  writer_.add_scalar(section + "img_per_s", r.images_per_s, r.global_step);
}

}  // namespace dpt::train
