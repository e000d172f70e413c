#pragma once
// Plain progress lines on stdout for `dptrain train` and `dptrain eval`: one per print_freq steps
// and one per train or validation pass.
//
//   epoch 1 step 10/63: loss 1.8431 acc1 35.94 acc5 87.50 lr 0.05 1520 img/s eta 7s
//   epoch 1 train: loss 1.2010 acc1 58.11 acc5 94.12, 4000 images, 2610 img/s, 1.5 s
//   epoch 1 val: loss 0.4123 acc1 91.21 acc5 99.90, 1001 images

#include <cinttypes>
#include <cstdio>

#include "dptrain/train/report.h"

namespace dpt::cli {

class PlainObserver : public train::TrainObserver {
 public:
  explicit PlainObserver(int64_t print_freq) : print_freq_(print_freq > 0 ? print_freq : 1) {}

  void on_step(const train::StepReport& r) override {
    if (r.step_in_epoch % print_freq_ != 0 && r.step_in_epoch != r.steps_per_epoch) return;
    std::printf("epoch %" PRId64 " step %" PRId64 "/%" PRId64 ": loss %.4f acc1 %.2f acc5 %.2f lr %.4g %.0f img/s eta %.0fs\n",
                r.epoch + 1, r.step_in_epoch, r.steps_per_epoch, r.loss, r.acc1, r.acc5, r.lr, r.images_per_s,
                r.eta_s);
    std::fflush(stdout);
  }

  void on_epoch(const train::EpochReport& r) override {
    std::printf("epoch %" PRId64 " %s: loss %.4f acc1 %.2f acc5 %.2f, %" PRId64 " images, %.0f img/s, %.1f s",
                r.epoch + 1, r.phase.c_str(), r.loss, r.acc1, r.acc5, r.samples, r.images_per_s, r.seconds);
    if (r.skipped_images > 0) std::printf(", %" PRId64 " bad images skipped", r.skipped_images);
    std::printf("\n");
    std::fflush(stdout);
  }

 private:
  int64_t print_freq_;
};

}  // namespace dpt::cli
