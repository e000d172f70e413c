// The training steps of an epoch (trainer_state.h): each step's micro-batches, its TrainStep
// (train_step.h), the step's sums over the ranks, and what is reported of it.
#include "trainer_state.h"

#include <fmt/format.h>

#include <algorithm>
#include <optional>
#include <string>
#include <vector>

#include "dptrain/common/error.h"
#include "dptrain/common/host_name.h"
#include "dptrain/dist/all_gather_strings.h"

namespace dpt::train {

std::optional<MetricSums> Trainer::State::step(data::DevicePrefetcher& batches) {
  const auto step_began = Clock::now();
  const StepPosition at = position();
  StepPhaseHook* phases = phase_hook();
  std::vector<data::Batch> micro_batches;
  while (static_cast<int64_t>(micro_batches.size()) < accum_steps) {
    auto batch = batches.next();
    if (!batch) break;
    micro_batches.push_back(std::move(*batch));
  }
  if (micro_batches.empty()) return std::nullopt;  // (no step: nothing to trace)
  if (phases != nullptr) phases->on_phase(StepPhase::Data, step_began, Clock::now(), at.number);
  // Before the step's collectives: a step that completes (and so any a checkpoint holds) has its
  // line on every rank, also on one killed right after it.
  if (sample_log) {
    std::vector<int64_t> trained;
    for (const auto& batch : micro_batches) trained.insert(trained.end(), batch.indices.begin(), batch.indices.end());
    sample_log->record(at.number, at.epoch, trained);
  }
  comm->flight_recorder().set_step(at.number);
  optim::set_lr(*optimizer, schedule->lr_at(global_step()));
  MetricSums local = train_step->forward_backward(micro_batches, at);
  local.stop_votes = stop_vote();
  if (continues_on_failure() && leader()) local.join_requests = join_requests();
  local.skipped_images = batches.skipped_count() - skipped_stepped;
  skipped_stepped += local.skipped_images;
  if (stragglers) local.rank_rows = stragglers->rows_to_send(at.number);
  StepPhaseTimer reducing_metrics(phases, StepPhase::MetricsAllReduce, at.number);
  MetricSums all = ranks().sum(local);
  reducing_metrics.stop();
  if (stragglers && !all.rank_rows.empty()) {
    const auto slow = stragglers->judge(all.rank_rows, at.number);
    notify([&](TrainObserver& o) { o.on_rank_busy(at.number, stragglers->last_busy_ms()); });
    if (slow) report_straggler(*slow);
  }
  train_step->update(all, at);
  if (timeline) {
    timeline->add(Timeline::Track::Training, "step", step_began, Clock::now(), {{"step", at.number}});
    timeline->flush();
  }
  if (heartbeat) heartbeat->step_took(Clock::now() - step_began);
  if (round_change) report_round();
  ++step_in_epoch;
  // An epoch's last step may be short (or padded): the count stops at the epoch's end, so that a
  // world that changes there has no rest of the epoch to re-shard.
  samples_in_epoch = std::min(samples_in_epoch + global_batch(), sampler->epoch_length());
  return all;
}

Trainer::State::EpochEnd Trainer::State::train_epoch(MetricSums& sums, std::vector<data::SkippedSample>& skipped) {
  model->train();
  sampler->set_epoch(epoch);
  data::Loader& loader = epoch_loader();
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
    if (continues_on_failure()) keep_step_start();
    std::optional<MetricSums> stepped;
    try {
      stepped = step(batches);
    } catch (const DistError& e) {
      if (!continues_on_failure()) throw;
      // The rebuild waits for this pass's loader and prefetcher to be gone: the caller's.
      found_loss = FoundLoss{e.what(), Clock::now(), /*in_step=*/true};
      skipped = batches.skipped();
      return EpochEnd::StepDropped;
    }
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
    if (all.join_requests > join_requests_seen) {  // every rank has the same count
      join_requests_asked = all.join_requests;
      skipped = batches.skipped();
      return EpochEnd::Admitting;
    }
  }
  skipped = batches.skipped();
  return stopped ? EpochEnd::Stopped : EpochEnd::Finished;
}

data::Loader& Trainer::State::epoch_loader() {
  // The last epoch's loader has had this one queued since that epoch began, unless the run
  // resumed mid-epoch. Resuming: a sample's augmentation is fixed by (seed, epoch, index), so
  // continuing the epoch's order after the samples done continues exactly (re-sharded if the
  // world changed).
  const bool queued = train_loader && samples_in_epoch == 0 && train_loader->next_epoch();
  if (!queued) {
    train_loader = std::make_unique<data::Loader>(data.train, sampler->indices_from(samples_in_epoch), epoch,
                                                  batch_loading(options, device));
  }
  DPT_CHECK(train_loader->epoch() == epoch, InternalError, "the training loader holds epoch ",
            train_loader->epoch(), " for epoch ", epoch);
  const int64_t next = epoch + 1;
  const bool next_trains = next < options.epochs() &&
                           (!options.max_steps() || next * steps_per_epoch() < *options.max_steps());
  if (next_trains) {
    data::DistributedSampler next_order = *sampler;
    next_order.set_epoch(next);
    train_loader->queue_epoch(next_order.indices(), next);
  }
  return *train_loader;
}

void Trainer::State::report_round() {
  MembershipReport report = *round_change;
  round_change.reset();
  report.resumed_step = global_step();  // (this round's first step is done, not yet counted)
  const auto now = Clock::now();
  if (round_before_ended) report.seconds = std::chrono::duration<double>(now - *round_before_ended).count();
  if (timeline && round_before_ended) {
    TimelineArgs args = {{"round", report.round}, {"resumed_step", report.resumed_step}};
    if (report.last_logged_step) args.emplace_back("steps_lost", report.steps_lost());
    timeline->add(Timeline::Track::Training, "round " + std::to_string(report.round), *round_before_ended, now, args);
  }
  if (!leader()) return;
  if (options.log() != nullptr) {
    *options.log() << fmt::format(
                          "round {}: after '{}', {} process(es) ({} before) resumed at global step {}{}; {:.1f} s from the "
                          "end of the round before to this round's first step",
                          report.round, report.cause, report.world_size,
                          report.world_size_before > 0 ? std::to_string(report.world_size_before) : "no checkpoint",
                          report.resumed_step,
                          report.last_logged_step
                              ? fmt::format(", {} step(s) after it lost (the log's last was step {})", report.steps_lost(),
                                            *report.last_logged_step)
                              : std::string(),
                          report.seconds)
                   << std::endl;
  }
  notify([&](TrainObserver& o) { o.on_membership(report); });
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

}  // namespace dpt::train
