#include "dptrain/train/logs/console_observer.h"

#include <unistd.h>

#include <algorithm>
#include <cmath>

#include <fmt/format.h>


namespace dpt::train {
namespace {

constexpr int64_t kBarWidth = 20;

std::string hours_minutes_seconds(double seconds) {
  if (!std::isfinite(seconds)) return "-:--:--";
  const int64_t s = std::llround(std::max(0.0, seconds));
  return fmt::format("{}:{:02d}:{:02d}", s / 3600, s / 60 % 60, s % 60);
}

// "  GFLOP/s 231  MFU 42%" (TFLOP/s from 1000 GFLOP/s on); nothing when the model's FLOPs were not
// counted.
std::string model_rate(const ModelRate& rate) {
  if (rate.flop_per_s <= 0) return "";
  std::string text = rate.flop_per_s < 1e12 ? fmt::format("  GFLOP/s {:.0f}", rate.flop_per_s / 1e9)
                                            : fmt::format("  TFLOP/s {:.2f}", rate.flop_per_s / 1e12);
  if (rate.mfu) text += fmt::format("  MFU {:.0f}%", *rate.mfu * 100);
  return text;
}

// One decimal from 100 images/s up; four significant digits below, so that a large model's 1.1
// img/s still tells 1.099 from 1.149.
std::string images_per_second(double rate) {
  return rate >= 100 ? fmt::format("{:.1f}", rate) : fmt::format("{:.4g}", rate);
}

std::string step_metrics(const StepReport& r) {
  return fmt::format("Loss {:.4f}  Acc@1 {:.2f}  Acc@5 {:.2f}  lr {:#.4g}  img/s {}  ETA {}{}",
                     r.loss, r.acc1, r.acc5, r.lr, images_per_second(r.images_per_s), hours_minutes_seconds(r.eta_s),
                     model_rate(r.model_rate));
}

// " 41/100": the step, padded to the width of the step count (imagenet/main.py's format).
std::string position(const StepReport& r) {
  const int width = static_cast<int>(std::to_string(r.steps_per_epoch).size());
  return fmt::format("{:>{}}/{}", r.step_in_epoch, width, r.steps_per_epoch);
}

std::string bar(const StepReport& r) {
  const int64_t done =
      r.steps_per_epoch > 0
          ? std::clamp(r.step_in_epoch * kBarWidth / r.steps_per_epoch, int64_t{0}, kBarWidth)
          : 0;
  if (done == kBarWidth) return std::string(kBarWidth, '=');
  return std::string(done, '=') + '>' + std::string(kBarWidth - done - 1, '.');
}

}  // namespace

ConsoleObserver::ConsoleObserver(const ConsoleOptions& options)
    : out_(options.out()),
      print_freq_(checked_print_freq(options.print_freq())),
      interactive_(options.interactive().value_or(::isatty(::fileno(options.out())) == 1)) {}

void ConsoleObserver::put(const std::string& text) {
  std::fwrite(text.data(), 1, text.size(), out_);
  std::fflush(out_);
}

void ConsoleObserver::end_open_line() {
  if (open_line_width_ == 0) return;
  open_line_width_ = 0;
  put("\n");
}

void ConsoleObserver::on_step(const StepReport& r) {
  if (!interactive_) {
    if (logs_step(r, print_freq_)) {
      put(fmt::format("Epoch: [{}][{}]  {}\n", r.epoch, position(r), step_metrics(r)));
    }
    return;
  }
  std::string line =
      fmt::format("Epoch: [{}] [{}] {}  {}", r.epoch, bar(r), position(r), step_metrics(r));
  const size_t width = line.size();
  if (width < open_line_width_) line.append(open_line_width_ - width, ' ');
  const bool last = r.step_in_epoch >= r.steps_per_epoch;
  put("\r" + line + (last ? "\n" : ""));
  open_line_width_ = last ? 0 : width;
}

void ConsoleObserver::on_epoch(const EpochReport& r) {
  end_open_line();
  // An evaluation of its own (dptrain eval) is in no epoch.
  std::string line = fmt::format("{} {:<5}  Loss {:.4f}  Acc@1 {:.2f}  Acc@5 {:.2f}",
                                 r.standalone ? std::string("Eval:") : fmt::format("Epoch: [{}]", r.epoch), r.phase,
                                 r.loss, r.acc1, r.acc5);
  line += fmt::format("  samples {}  img/s {}  time {:.1f}s{}", r.samples, images_per_second(r.images_per_s),
                      r.seconds, model_rate(r.model_rate));
  if (r.skipped_images > 0) line += fmt::format("  bad images {}", r.skipped_images);
  put(line + "\n");
}

void ConsoleObserver::on_finish() { end_open_line(); }

}  // namespace dpt::train
