#pragma once
// Synthetic reports for the log observers' tests: values chosen so every formatted digit is known.
//
//   dpt::train::StepReport r = dpt::testing::sample_step(/*step=*/6, /*steps=*/12);

#include <cstdint>
#include <string>

#include "dptrain/train/logs/report.h"

namespace dpt::testing {

// Epoch 3 of a run with `steps` steps per epoch: loss 2/step, acc1 10*step/3, acc5 50+step,
// lr 0.1, 345.64 img/s, ETA 1.5 s per remaining step.
inline train::StepReport sample_step(int64_t step, int64_t steps) {
  train::StepReport r;
  r.epoch = 3;
  r.step_in_epoch = step;
  r.steps_per_epoch = steps;
  r.global_step = 3 * steps + step;
  r.loss = 2.0 / step;
  r.acc1 = 10.0 * step / 3;
  r.acc5 = 50.0 + step;
  r.lr = 0.1;
  r.images_per_s = 345.64;
  r.eta_s = 1.5 * (steps - step);
  return r;
}

inline train::EpochReport sample_epoch(const std::string& phase, int64_t skipped_images) {
  train::EpochReport r;
  r.phase = phase;
  r.epoch = 3;
  r.global_step = 48;
  r.loss = phase == "train" ? 0.5 : 0.75;
  r.acc1 = phase == "train" ? 40.0 : 38.25;
  r.acc5 = phase == "train" ? 70.5 : 69.0;
  r.samples = phase == "train" ? 1536 : 500;
  r.images_per_s = phase == "train" ? 350.04 : 1000.0;
  r.seconds = phase == "train" ? 4.3875 : 0.5;
  r.skipped_images = skipped_images;
  return r;
}

}  // namespace dpt::testing
