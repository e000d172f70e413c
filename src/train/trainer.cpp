// The Trainer: a run's epochs, each followed by validation and a checkpoint, and the stop requests
// that end a run early. Its parts: trainer_state.h.
#include "dptrain/train/trainer.h"

#include <ATen/CPUGeneratorImpl.h>
#include <torch/utils.h>
#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <optional>
#include <string>
#include <vector>

#include "dptrain/common/error.h"
#include "dptrain/compat/compat.h"
#include "dptrain/train/checkpoint/newest_among_ranks.h"
#include "dptrain/train/checkpoint/optimizer_state.h"
#include "dptrain/train/checkpoint/sharded_optimizer_state.h"
#include "dptrain/train/ps_server_role.h"
#include "local_setup.h"
#include "trainer_state.h"

namespace dpt::train {

Trainer::Trainer(TrainOptions options) : state_(std::make_unique<State>(std::move(options))) {
  State& s = *state_;
  DPT_CHECK(!serves_parameters(s.options), ConfigError, "this process is one of the --mode ps job's ",
            s.options.parallel().ps().servers(), " parameter server(s) (its last ranks): it serves ",
            "(serve_parameters), it does not train");
  LocalSetup local = prepare_locally(s.options);
  s.data = std::move(local.data);
  s.model = local.model;
  // Then the process group, and what needs it.
  s.join();
  s.prepare_to_continue();
  FoundCheckpoint resumed = std::move(local.resumed);
  // A replacement goes on from the running group's state, which it receives in place of a resume.
  std::optional<TrainingCheckpoint> received;
  if (s.replacement) {
    received = s.receive_state();
    s.take_received_weights(*received);
  } else if (s.options.checkpoint().resume() == kResumeAuto) {
    resumed = newest_among_ranks(*s.comm, std::move(resumed), s.options.checkpoint().output_dir());
    if (resumed.received) s.take_received_weights(*resumed.checkpoint);
  }
  s.build_step();
  s.epoch = s.options.start_epoch();
  s.start_notes = std::move(local.notes);
  s.untrained_classifier = std::move(local.untrained_classifier);
  for (const auto& skipped : resumed.passed_over) s.start_notes.push_back("warning: " + skipped);
  s.expect_round_report(resumed.checkpoint ? static_cast<int>(resumed.checkpoint->world_size) : 0);
  if (received) {
    s.restore(*received, "the state received from rank 0");
    s.check_replicas_agree();  // as the ranks that admitted this one do, after their rebuild
  } else if (resumed.checkpoint) {
    s.restore(*resumed.checkpoint, resumed.file);
    s.start_notes.push_back(str("resuming from ", resumed.file.string(), " (epoch ", s.epoch, ", step ",
                                s.step_in_epoch, " of it, global step ", s.global_step(), ")"));
    // Said by the rank that received it: the banner is rank 0's.
    if (resumed.received && s.options.log() != nullptr) {
      const auto& got = *resumed.received;
      *s.options.log() << "rank " << s.comm->rank() << ": resuming from the checkpoint of rank " << got.rank
                       << " (global step " << s.global_step() << "), which this rank's folder lacked; a copy is in "
                       << resumed.file.string()
                       << fmt::format(" ({:.1f} MB received in {:.2f} s, {:.3f} Gbit/s)", got.bytes / 1e6, got.seconds,
                                      got.seconds > 0 ? got.bytes * 8 / got.seconds / 1e9 : 0.0)
                       << std::endl;
    }
  } else if (s.options.checkpoint().resume() == kResumeAuto) {
    s.start_notes.push_back(str("--resume auto: no checkpoint in ", s.options.checkpoint().output_dir(),
                                " yet; starting fresh"));
  }
  s.style->start();
  s.open_logs();
  if (s.replacement && s.sample_log) s.sample_log->joined(s.global_step());
  s.train_step = std::make_unique<TrainStep>(StepParts{s.options, s.model, s.device, *s.style, *s.scaler, *s.mixing,
                                                       s.ema.get(), s.phase_hook(), s.timeline.get()});
  s.print_banner();
}

Trainer::~Trainer() {
  if (state_->comm) state_->notify([](TrainObserver& o) { o.on_finish(); });
}

int Trainer::rank() const { return state_->comm->rank(); }
int Trainer::world_size() const { return state_->comm->size(); }

TrainingCheckpoint Trainer::State::checkpoint_state() {
  TrainingCheckpoint cp;
  cp.arch = options.arch();
  cp.epoch = epoch;
  cp.step_in_epoch = step_in_epoch;
  cp.global_step = global_step();
  cp.global_batch = global_batch();
  cp.samples_in_epoch = samples_in_epoch;
  cp.world_size = comm->size();
  cp.lr_reference_batch = schedule->options().reference_batch().value_or(global_batch());
  cp.best_acc1 = best_acc1;
  cp.seed = options.seed();
  cp.sampler = sampler->state();
  cp.state_dict = models::state_dict(*model);
  // Sharded, what save_checkpoint gathered (before the first checkpoint: nothing, so the
  // writer's prepared memory falls short by the optimizer state).
  cp.optimizer = sharded ? gathered_optimizer_state : optimizer_state_dict(*optimizer);
  cp.scaler = scaler->state_dict();
  cp.comm_hook = gathered_comm_hook_state;
  cp.bucket_cap_mb = style->tuned_bucket_cap_mb();
  if (ema) cp.model_ema = ema->state_dict();
  at::Generator generator = at::detail::getDefaultCPUGenerator();
  cp.rng_state = generator.get_state();
  return cp;
}

void Trainer::State::prepare_checkpoints() {
  if (leader() && checkpoints->wants_preparing()) checkpoints->prepare(checkpoint_state().to_ivalue());
}

void Trainer::State::save_checkpoint(RunCheckpoints::Cause cause, BestModel best) {
  if (!checkpoints->enabled()) return;
  // Every rank sends its shard of the optimizer state; rank 0 writes the whole.
  if (sharded) gathered_optimizer_state = consolidated_optimizer_state_dict(*sharded, /*to=*/0);
  gathered_comm_hook_state = style->gather_comm_hook_state();
  if (!leader()) return;
  const auto snapshot = span_of(timeline.get(), "checkpoint", {{"step", global_step()}});
  style->gather_state();
  const std::optional<int64_t> epoch_done =
      cause == RunCheckpoints::Cause::Epoch ? std::optional<int64_t>(epoch) : std::nullopt;
  checkpoints->save(checkpoint_state().to_ivalue(), global_step(), epoch_done, best, cause);
}

bool Trainer::State::stop_agreed_in(const MetricSums& all) const {
  if (all.stop_votes > 0 && leader() && options.log() != nullptr) {
    *options.log() << "stopping on request after global step " << global_step() << " (a stop signal reached "
                   << all.stop_votes << " rank(s)); writing the checkpoint" << std::endl;
  }
  return all.stop_votes > 0;
}

bool Trainer::State::any_rank_stopping() {
  if (!stop_signals) return false;
  MetricSums vote;
  vote.stop_votes = stop_vote();
  return stop_agreed_in(ranks().sum(vote));
}

TrainResult Trainer::train() {
  State& s = *state_;
  TrainResult result;
  s.untrained_classifier.clear();  // the epochs fit it before their validation
  if (!s.options.checkpoint().stop_signals().empty()) {
    s.stop_signals = std::make_unique<StopSignals>(s.options.checkpoint().stop_signals());
  }
  while (s.epoch < s.options.epochs()) {
    const auto start = State::Clock::now();
    MetricSums sums;
    std::vector<data::SkippedSample> skipped;
    State::EpochEnd end = s.train_epoch(sums, skipped);
    // The same epoch goes on over the ranks left (or with the replacements admitted), from its
    // last completed step.
    while (end == State::EpochEnd::StepDropped || end == State::EpochEnd::Admitting) {
      if (end == State::EpochEnd::StepDropped) {
        s.go_on_without_lost();
      } else {
        s.admit_replacements();
      }
      end = s.train_epoch(sums, skipped);
    }
    if (end == State::EpochEnd::Stopped) {
      s.save_checkpoint(RunCheckpoints::Cause::Stop);
      s.checkpoints->finish();
      // The other ranks wait for rank 0's checkpoint, so that no process exits before it is whole.
      if (s.stop_agreed) s.ranks().barrier();
      break;
    }
    // The whole pass's bad images, also those of batches after the last step (or of a pass whose
    // every batch was bad): the steps carried only their own.
    sums.skipped_images = s.going_on([&] { return s.ranks().sum(static_cast<int64_t>(skipped.size())); });
    // A run stopped after an epoch's last step resumes into an empty pass: nothing to report.
    // (`sums` holds every rank's counts, so all ranks skip alike.)
    if (sums.count > 0 || sums.skipped_images > 0) s.report_pass("train", sums, skipped, start);

    s.going_on([&] {
      {
        const auto validating = span_of(s.timeline.get(), "validation", {{"epoch", s.epoch + 1}});
        result.last_val = evaluate();
      }
      if (s.ema) {
        const auto validating = span_of(s.timeline.get(), "validation (EMA)", {{"epoch", s.epoch + 1}});
        result.last_val_ema = s.evaluate(*s.ema->module(), "val_ema");
      }
    });
    // Every rank holds the summed loss, so all decide alike. A model whose validation loss is not
    // finite has diverged, whatever its top-1 (in evaluation mode, BatchNorm's running statistics
    // can overflow while training's own loss stays finite): never the best.
    const bool val_finite = std::isfinite(result.last_val.loss_sum);
    if (!val_finite && s.leader() && s.options.log() != nullptr) {
      *s.options.log() << "warning: the validation loss after epoch " << s.epoch + 1
                       << " is not finite: the model has diverged, so this epoch is not taken as the best "
                          "(lower --lr or lengthen --warmup-epochs)"
                       << std::endl;
    }
    const double acc1 = result.last_val.top1_percent();
    const BestModel best = !val_finite ? BestModel::Keep : acc1 > s.best_acc1 ? BestModel::Replace : BestModel::IfNone;
    if (best == BestModel::Replace) s.best_acc1 = acc1;
    ++s.epoch;
    s.step_in_epoch = 0;
    s.samples_in_epoch = 0;
    s.save_checkpoint(RunCheckpoints::Cause::Epoch, best);
    s.checkpoints->report();
    if (s.options.max_steps() && s.global_step() >= *s.options.max_steps()) break;
    // A stop signal that came during validation: the epoch's checkpoint is written, so stop now
    // rather than after the next epoch's first step.
    if (s.going_on([&] { return s.any_rank_stopping(); })) {
      s.stop_agreed = true;
      s.checkpoints->finish();
      s.ranks().barrier();
      break;
    }
  }
  s.train_loader.reset();  // its threads, and the batches it built for an epoch not trained
  // Past the last collective the ranks end at their own pace: a rank gone in order is not lost.
  s.heartbeat.reset();
  if (s.continues_on_failure() && s.leader()) s.close_joining();
  s.checkpoints->finish();
  s.checkpoints->check_last_written();
  s.stop_signals.reset();
  result.stopped_on_request = s.stop_agreed;
  result.epochs_done = s.epoch;
  result.global_step = s.global_step();
  result.best_acc1 = s.best_acc1;
  return result;
}

MetricSums Trainer::evaluate() {
  refuse_untrained_classifier(state_->untrained_classifier);
  state_->style->before_evaluate();
  return state_->evaluate(*state_->model, "val");
}

MetricSums Trainer::State::evaluate(models::ClassifierImpl& net, const std::string& phase) {
  const auto start = Clock::now();
  net.eval();
  if (!ranks().validates()) return {};
  const LocalPass local = validate_locally(net, data.val, ranks().validation_indices(data.val->size()), options, device);
  const MetricSums all = ranks().sum(local.sums);
  report_pass(phase, all, local.skipped, start);
  return all;
}

void Trainer::State::report_pass(const std::string& phase, const MetricSums& all,
                                 const std::vector<data::SkippedSample>& skipped_here, Clock::time_point start) {
  EpochReport report = pass_report(phase, all, seconds_since(start));
  place(report);
  if (phase == "train") report.model_rate = model_rate(report.images_per_s);
  notify([&](TrainObserver& o) { o.on_epoch(report); });
  const int64_t images = phase == "train" ? data.train->size() : data.val->size();
  const std::string line = bad_images.finish({pass_name(phase), all.skipped_images, all.count, images, skipped_here});
  if (!line.empty() && options.log() != nullptr) *options.log() << line << std::endl;
}

}  // namespace dpt::train
