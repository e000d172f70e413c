// The training steps of an epoch (trainer_state.h): each micro-batch's forward and backward,
// the reduced gradients' update, the step's sums over the ranks, and what is reported of it.
#include "trainer_state.h"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <optional>
#include <string>
#include <tuple>
#include <vector>

#include "dptrain/common/error.h"
#include "dptrain/common/host_name.h"
#include "dptrain/compat/compat.h"
#include "dptrain/dist/all_gather_strings.h"

namespace dpt::train {

Trainer::State::Forward Trainer::State::train_forward(const at::Tensor& images, const at::Tensor& targets) {
  at::Tensor logits;
  std::vector<models::AuxiliaryLogits> auxiliary;
  {
    compat::AutocastGuard autocast(device.type(), amp_dtype(device), options.amp());
    logits = style->forward(images);
    // Every style's training forward runs this process's model (--mode dp refuses heads).
    auxiliary = model->take_auxiliary_logits();
  }
  logits = logits.to(at::kFloat);
  auto loss = criterion(logits, targets);
  auto objective = loss;
  for (const auto& head : auxiliary) {
    objective = objective + head.loss_weight * criterion(head.logits.to(at::kFloat), targets);
  }
  return {logits, loss, objective};
}

at::Tensor Trainer::State::mix(at::Tensor& images, const at::Tensor& labels, int64_t k) const {
  constexpr uint64_t kMixingStream = 0x6d6978696e67;  // apart from the per-sample crop streams
  data::SampleRng rng(options.seed() ^ kMixingStream, epoch,
                      (step_in_epoch * accum_steps + k) * comm->size() + comm->rank());
  return mixing->apply(images, labels, mixing->draw(rng, images.size(2), images.size(3)));
}

std::optional<MetricSums> Trainer::State::step(data::DevicePrefetcher& batches) {
  const auto step_began = Clock::now();
  const int64_t at_step = global_step() + 1;  // steps count from 1 in logs and messages
  StepPhaseHook* phases = phase_hook();
  std::vector<data::Batch> micro_batches;
  while (static_cast<int64_t>(micro_batches.size()) < accum_steps) {
    auto batch = batches.next();
    if (!batch) break;
    micro_batches.push_back(std::move(*batch));
  }
  if (micro_batches.empty()) return std::nullopt;  // (no step: nothing to trace)
  if (phases != nullptr) phases->on_phase(StepPhase::Data, step_began, Clock::now(), at_step);
  int64_t step_samples = 0;
  for (const auto& batch : micro_batches) step_samples += batch.labels.size(0);
  comm->flight_recorder().set_step(at_step);
  set_lr(*optimizer, schedule->lr_at(global_step()));
  style->zero_grad();
  MetricSums local;
  for (size_t k = 0; k < micro_batches.size(); ++k) {
    at::Tensor images, labels, targets;
    {
      StepPhaseTimer copying(phases, StepPhase::CopyToDevice, at_step);
      std::tie(images, labels) = to_device(micro_batches[k]);
      targets = mixing->enabled() ? mix(images, labels, static_cast<int64_t>(k)) : labels;
    }
    Forward forward;
    {
      StepPhaseTimer forwarding(phases, StepPhase::Forward, at_step);
      forward = train_forward(images, targets);
    }
    // Each micro-batch's mean loss weighted by its share of the step's samples: the gradient of the
    // whole step's mean loss, as if its micro-batches were one batch.
    const at::Tensor step_loss =
        micro_batches.size() == 1
            ? forward.objective
            : forward.objective * (static_cast<double>(labels.size(0)) / static_cast<double>(step_samples));
    const bool reduce = k + 1 == micro_batches.size();
    {
      StepPhaseTimer backward(phases, StepPhase::Backward, at_step);
      style->backward(scaler->scale(step_loss), reduce);
    }
    if (reduce) trace_reduction(at_step);
    // A mixed sample counts as its larger class, as torchvision's accuracy takes it.
    local.add(forward.logits.detach(), mixing->enabled() ? targets.argmax(1) : labels, forward.loss.item<double>());
  }
  {
    StepPhaseTimer synchronizing(phases, StepPhase::Synchronize, at_step);
    style->synchronize();
  }
  local.stop_votes = stop_vote();
  local.skipped_images = batches.skipped_count() - skipped_stepped;
  skipped_stepped += local.skipped_images;
  if (stragglers) local.rank_rows = stragglers->rows_to_send(at_step);
  StepPhaseTimer reducing_metrics(phases, StepPhase::MetricsAllReduce, at_step);
  MetricSums all = ranks().sum(local);
  reducing_metrics.stop();
  if (stragglers && !all.rank_rows.empty()) {
    const auto slow = stragglers->judge(all.rank_rows, at_step);
    notify([&](TrainObserver& o) { o.on_rank_busy(at_step, stragglers->last_busy_ms()); });
    if (slow) report_straggler(*slow);
  }
  // NaN or inf on any rank makes the summed loss non-finite on every rank, so all ranks decide
  // alike. The scaler skips such steps; without it, continuing would spread NaN into the weights.
  if (!scaler->is_enabled()) {
    DPT_CHECK(std::isfinite(all.loss_sum), Error, "rank ", comm->rank(), ": the loss is not finite at step ",
              at_step, " (epoch ", epoch + 1, ", step ", step_in_epoch + 1,
              "); lower --lr or lengthen --warmup-epochs");
  }
  StepPhaseTimer stepping(phases, StepPhase::Optimizer, at_step);
  if (!style->applies_update()) {
    if (const auto max_norm = options.optimizer().clip_grad_norm()) {
      // On the reduced gradients, so every rank clips alike; unscaled first, as torchvision does.
      scaler->unscale_(*optimizer);
      style->clip_grad_norm(*max_norm);
    }
    scaler->step(*optimizer);
    scaler->update();
  }
  if (ema && step_in_epoch % options.model_ema()->steps() == 0) {
    ema->update(*model);
    // During warm-up the average keeps copying the weights, as torchvision's recipe does.
    if (epoch < options.schedule().warmup_epochs()) ema->reset();
  }
  stepping.stop();
  if (timeline) {
    timeline->add(Timeline::Track::Training, "step", step_began, Clock::now(), {{"step", at_step}});
    timeline->flush();
  }
  ++step_in_epoch;
  samples_in_epoch += global_batch();
  return all;
}

bool Trainer::State::train_epoch(MetricSums& sums, std::vector<data::SkippedSample>& skipped) {
  model->train();
  sampler->set_epoch(epoch);
  // Resuming mid-epoch: a sample's augmentation is fixed by (seed, epoch, index), so continuing the
  // epoch's order after the samples done continues exactly (re-sharded if the world changed).
  data::Loader loader(data.train, sampler->indices_from(samples_in_epoch), epoch, batch_loading(options, device));
  // On a GPU the next batch's copy runs on a side stream while this step computes: on the compute
  // stream it would hold the step's kernels back for its whole length (a 154 MB float32 batch of
  // 256 at 224 px is several milliseconds over PCIe). On the CPU batches pass through.
  data::DevicePrefetcher batches(loader, data::DevicePrefetcherOptions(device));
  const int64_t steps = options.max_steps()
                            ? std::min(steps_per_epoch(), *options.max_steps() - epoch * steps_per_epoch())
                            : steps_per_epoch();
  const auto start = Clock::now();
  const int64_t first_step = step_in_epoch;
  skipped_stepped = 0;
  bool stopped = false;
  while (true) {
    if (options.max_steps() && global_step() >= *options.max_steps()) {
      stopped = step_in_epoch < steps_per_epoch();
      break;
    }
    const std::optional<MetricSums> stepped = step(batches);
    if (!stepped) break;
    const MetricSums& all = *stepped;
    sums.add(all);
    // Every rank has the same sums: past the bound, all stop here, before this step's checkpoint.
    if (all.skipped_images > 0) {
      bad_images.check({pass_name("train") + fmt::format(", step {}", global_step()), sums.skipped_images,
                        sums.count, data.train->size(), batches.skipped()});
    }
    const double elapsed = seconds_since(start);
    const int64_t taken = step_in_epoch - first_step;
    StepReport report;
    score(report, all);
    report.step_in_epoch = step_in_epoch;
    report.steps_per_epoch = steps;
    report.lr = schedule->lr_at(global_step() - 1);
    report.images_per_s = elapsed > 0 ? static_cast<double>(sums.count) / elapsed : 0.0;
    report.model_rate = model_rate(report.images_per_s);
    report.eta_s = taken > 0 ? elapsed / taken * static_cast<double>(std::max<int64_t>(0, steps - step_in_epoch)) : 0.0;
    notify([&](TrainObserver& o) { o.on_step(report); });
    if (stop_agreed_in(all)) {  // the caller writes the checkpoint
      stop_agreed = true;
      stopped = true;
      break;
    }
    if (periodic_checkpoint_due()) {
      save_checkpoint(RunCheckpoints::Cause::Periodic);
    } else {
      prepare_checkpoints();
    }
    checkpoints->report();
  }
  skipped = batches.skipped();
  return !stopped;
}

void Trainer::State::report_straggler(StragglerReport slow) {
  // Every rank judged the same summed table, so every rank is here: the gather is collective.
  if (hosts.empty()) hosts = dist::all_gather_strings(*comm, host_name());
  slow.host = hosts.at(static_cast<size_t>(slow.rank));
  if (options.log() != nullptr) {
    *options.log() << fmt::format(
                          "straggler: rank {} on {} is slow: busy {:.1f} ms per step against the other ranks' "
                          "{:.1f} ms ({:.2f}x) for {} windows ({} steps) up to step {}; its slowest part is {}: "
                          "{:.1f} ms against {:.1f} ms",
                          slow.rank, slow.host, slow.busy_ms, slow.others_busy_ms, slow.busy_ms / slow.others_busy_ms,
                          slow.windows, slow.steps, slow.global_step, slow.part, slow.part_ms,
                          slow.others_part_ms)
                   << std::endl;
  }
  notify([&](TrainObserver& o) { o.on_straggler(slow); });
}

bool Trainer::State::periodic_checkpoint_due() {
  if ((!leader() && !sharded) || step_in_epoch == steps_per_epoch()) return false;
  const bool steps_due = checkpoints->steps_due(global_step());
  bool time_due = leader() && checkpoints->time_due();
  if (sharded && options.checkpoint().every_minutes()) {
    at::Tensor flag = at::full({1}, time_due ? 1 : 0, at::kInt).to(comm->device());
    comm->broadcast(flag, 0);
    time_due = flag.cpu().item<int>() != 0;
  }
  return steps_due || time_due;
}

void Trainer::State::trace_reduction(int64_t at_step) {
  const Reducer* reducer = style->reducer();
  if (reducer == nullptr) return;
  const ReductionTimes times = reducer->last_reduction();
  if (timeline) {
    for (size_t b = 0; b < times.buckets.size(); ++b) {
      const auto& bucket = times.buckets[b];
      timeline->add(Timeline::Track::Communication, str("bucket ", b), bucket.launched, bucket.completed,
                    {{"step", at_step}, {"bytes", bucket.bytes}});
    }
  }
  if (StepPhaseHook* phases = phase_hook()) {
    phases->on_phase(StepPhase::WaitForCommunication, times.wait_began, times.finished, at_step);
  }
}

}  // namespace dpt::train
