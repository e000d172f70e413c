#include "run_checkpoints.h"

#include <fmt/format.h>

#include <utility>

#include "dptrain/common/atomic_file.h"
#include "dptrain/common/error.h"

namespace dpt::train {

RunCheckpoints::RunCheckpoints(CheckpointOptions options, CheckpointWriterOptions writer, std::ostream* log,
                               Timeline* timeline)
    : options_(std::move(options)), writer_options_(std::move(writer)), log_(log), timeline_(timeline) {}

bool RunCheckpoints::steps_due(int64_t global_step) const {
  return options_.every_steps() && global_step % *options_.every_steps() == 0;
}

bool RunCheckpoints::time_due() const {
  return options_.every_minutes() &&
         std::chrono::duration<double>(Clock::now() - last_taken_).count() >= *options_.every_minutes() * 60;
}

bool RunCheckpoints::wants_preparing() const {
  return !prepared_ && enabled() && (options_.every_steps() || options_.every_minutes());
}

void RunCheckpoints::prepare(const c10::IValue& state) {
  prepared_ = true;
  writer().prepare(state);
}

CheckpointWriter& RunCheckpoints::writer() {
  if (!writer_) {
    writer_ = std::make_unique<CheckpointWriter>(writer_options_);
    for (const std::filesystem::path& file : remove_unfinished_writes(options_.output_dir())) {
      if (log_ != nullptr) {
        *log_ << "checkpoint: removed " << file.string() << ", a write its killed process left unfinished"
              << std::endl;
      }
    }
  }
  return *writer_;
}

void RunCheckpoints::save(c10::IValue state, int64_t global_step, std::optional<int64_t> epoch_done, BestModel best,
                          Cause cause) {
  CheckpointWriter& to = writer();
  CheckpointRequest request;
  request.state = std::move(state);
  request.dir = options_.output_dir();
  request.step = global_step;
  request.epoch_done = epoch_done;
  request.keep = options_.keep();
  request.best = best;
  const int64_t in_flight = to.last_step();
  if (to.submit(std::move(request), cause == Cause::Periodic ? WhenBusy::Skip : WhenBusy::Wait)) {
    last_taken_ = Clock::now();
  } else if (log_ != nullptr) {
    *log_ << "checkpoint: none after step " << global_step << ": the write of step " << in_flight
          << " is still in flight (writes take longer than --checkpoint-every/--checkpoint-minutes leave them)"
          << std::endl;
  }
}

void RunCheckpoints::report() {
  if (!writer_) return;
  for (const CheckpointWrite& write : writer_->finished()) {
    last_write_ = write;
    if (timeline_ != nullptr) {
      timeline_->add(Timeline::Track::Checkpoint, "checkpoint write", write.began, write.ended, {{"step", write.step}});
    }
    if (log_ == nullptr) continue;
    // What a checkpoint costs, to choose --checkpoint-every/--checkpoint-minutes by.
    if (write.ok()) {
      *log_ << fmt::format("checkpoint: wrote {} ({:.1f} MB) in {:.2f} s; training paused {:.2f} s",
                           write.file.string(), static_cast<double>(write.bytes) / 1e6, write.write_s(),
                           write.paused_s)
            << std::endl;
    } else {
      *log_ << "checkpoint: the checkpoint of step " << write.step << " was not written: " << write.error
            << ". The files it would have replaced are kept; training goes on" << std::endl;
    }
  }
}

void RunCheckpoints::finish() {
  if (!writer_) return;
  writer_->wait();
  report();
}

void RunCheckpoints::check_last_written() const {
  DPT_CHECK(!last_write_ || last_write_->ok(), CheckpointError, "the last checkpoint (step ",
            last_write_ ? last_write_->step : 0, ") was not written: ", last_write_ ? last_write_->error : "",
            "; any checkpoint in ", options_.output_dir(), " is an older one");
}

}  // namespace dpt::train
