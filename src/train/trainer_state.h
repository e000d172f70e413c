#pragma once
// What a Trainer holds, shared by the files that make up its work:
//   trainer_setup.cpp  building the run: the process group, the step's parts, a resume, the logs;
//   trainer_step.cpp   the training steps of an epoch, each one a TrainStep (train_step.h);
//   trainer.cpp        the run's epochs, validation, checkpoints and stop requests;
//   trainer_reform.cpp going on without a lost rank, and taking replacements back (--on-failure continue).

#include <ATen/ATen.h>
#include <fmt/format.h>

#include <chrono>
#include <cstdint>
#include <filesystem>
#include <memory>
#include <mutex>
#include <optional>
#include <ostream>
#include <string>
#include <utility>
#include <vector>

#include "datasets.h"
#include "dptrain/compat/pickle.h"
#include "dptrain/data/device_prefetcher.h"
#include "dptrain/data/loader.h"
#include "dptrain/data/sampler.h"
#include "dptrain/dist/communicator.h"
#include "dptrain/dist/heartbeat.h"
#include "dptrain/dist/reformation.h"
#include "dptrain/models/classifier.h"
#include "dptrain/parallel/sharded_optimizer.h"
#include "dptrain/optim/amp.h"
#include "dptrain/train/bad_images.h"
#include "dptrain/train/batch_mixing.h"
#include "dptrain/train/checkpoint/training_checkpoint.h"
#include "dptrain/optim/grad_scaler.h"
#include "dptrain/train/logs/report.h"
#include "dptrain/train/logs/sample_log.h"
#include "dptrain/train/logs/timeline.h"
#include "dptrain/optim/lr_schedule.h"
#include "dptrain/train/metrics.h"
#include "dptrain/optim/model_ema.h"
#include "dptrain/train/stop_signals.h"
#include "dptrain/train/straggler_watch.h"
#include "dptrain/train/trainer.h"
#include "parallel_style.h"
#include "run_checkpoints.h"
#include "train_step.h"
#include "validation_pass.h"

namespace dpt::train {

struct Trainer::State {
  using Clock = std::chrono::steady_clock;
  static double seconds_since(Clock::time_point start) {
    return std::chrono::duration<double>(Clock::now() - start).count();
  }

  TrainOptions options;
  RunDatasets data;
  models::Classifier model{nullptr};
  std::shared_ptr<dist::Communicator> comm;  // the ranks that train (--mode ps: the workers)
  std::shared_ptr<dist::Communicator> job;   // every process of the job (--mode ps: the servers too)
  // After a restart or a re-formation (the launcher says what ended the round before): the round's
  // report, told after its first step (report_round), and when the round before ended, by this
  // machine's steady clock, as the launcher saw it.
  std::optional<MembershipReport> round_change;
  std::optional<Clock::time_point> round_before_ended;
  // The trainers' heartbeat (ParallelOptions::heartbeat) where they step together, from the
  // style's start to the end of train().
  std::unique_ptr<dist::Heartbeat> heartbeat;
  // --on-failure continue (trainer_reform.cpp). What the heartbeat told of a loss, from its thread.
  struct Losses {
    std::mutex mutex;
    std::vector<int> ranks;  // the ranks named lost
  };
  std::shared_ptr<Losses> losses = std::make_shared<Losses>();
  // The job's store as the ranks joined it, where a launcher that serves it marks the workers it
  // saw fail, and each rank of the current group's rank in that first one.
  compat::StorePtr joined_store;
  std::vector<int> joined_ranks;
  // The model's buffers (batch-norm statistics) and the CPU generator as the step in flight found
  // them: a step dropped for a loss has moved them, and the ranks go on from before it.
  std::vector<at::Tensor> step_start_buffers;
  at::Tensor step_start_rng;
  // A loss found by a collective: what failed, when, and whether a training step was in flight
  // (else the epoch's end: its validation). Set where it is caught, taken by go_on_without_lost.
  struct FoundLoss {
    std::string failure;
    Clock::time_point at;
    bool in_step = true;
  };
  std::optional<FoundLoss> found_loss;
  int reformations = 0;  // the group's, shrunk or grown: each names its new group
  // Replacements (dist/joining.h): whether this process is one, which joined the group that went
  // on; the asks admitted so far, and the count the last step's sums carried.
  bool replacement = false;
  int64_t join_requests_seen = 0;
  int64_t join_requests_asked = 0;
  at::Device device{at::kCPU};
  std::unique_ptr<ParallelStyle> style;
  std::shared_ptr<torch::optim::Optimizer> optimizer;  // the style's
  // The same optimizer where the style shards it over the ranks (--zero), each stepping its part;
  // checkpoints gather its state. Null where it is whole.
  std::shared_ptr<ShardedOptimizer> sharded;
  // Rank 0, under `sharded`: its state gathered for the checkpoint being written.
  c10::impl::GenericDict gathered_optimizer_state = compat::string_dict();
  // The style's comm hook state as save_checkpoint gathered it (--comm-hook powersgd).
  c10::impl::GenericDict gathered_comm_hook_state = compat::string_dict();
  std::unique_ptr<optim::GradScaler> scaler;
  std::unique_ptr<data::DistributedSampler> sampler;
  // The training batches, kept from one epoch to the next: the next epoch's first batches are
  // built while this one ends and the run validates.
  std::unique_ptr<data::Loader> train_loader;
  std::unique_ptr<optim::LrSchedule> schedule;
  std::unique_ptr<BatchMixing> mixing;
  std::unique_ptr<TrainStep> train_step;  // over the parts above, once the logs are open
  std::unique_ptr<optim::ModelEma> ema;  // --model-ema
  std::unique_ptr<Timeline> timeline;  // --timeline: this rank's
  std::unique_ptr<SampleLog> sample_log;  // --sample-log: this rank's
  std::unique_ptr<StragglerWatch> stragglers;  // the step's phase hook, passing phases on to the timeline
  std::vector<std::string> hosts;              // each rank's, gathered when a straggler is first named
  std::unique_ptr<RunCheckpoints> checkpoints;  // every rank's view of them; rank 0 writes
  BadImages bad_images{options.data().max_bad_images()};
  int64_t skipped_stepped = 0;  // this rank's bad images in the batches of the pass's steps so far
  int64_t epoch = 0;
  int64_t step_in_epoch = 0;
  int64_t samples_in_epoch = 0;  // over all ranks: where the epoch's shuffled order continues
  // Micro-batches per optimizer step: --accum-steps, or what keeps a resumed run's global batch
  // at another world size (adapt_to_world).
  int64_t accum_steps = 1;
  double best_acc1 = 0;
  // Set while train() runs, when CheckpointOptions::stop_signals names any.
  std::unique_ptr<StopSignals> stop_signals;
  bool stop_agreed = false;  // some rank caught a stop signal; every rank stops after this step
  // For the banner: the data's warnings, a --pretrained classifier made for other classes (left
  // fresh), where the run resumed from and the newer files that did not read.
  std::vector<std::string> start_notes;
  std::string untrained_classifier;  // LocalSetup's, until train() starts fitting it
  // For the reports (rank 0): a training image's FLOPs, 2 x 3 x the model's forward multiply-adds,
  // and the attainable FLOP/s of every unit the ranks compute on, when measured.
  double train_flop_per_image = 0;
  std::optional<double> run_peak_flop_per_s;

  explicit State(TrainOptions o) : options(std::move(o)) {}

  // trainer_setup.cpp: the constructor's steps after prepare_locally(), in order.
  void join();  // the process group(s) (a replacement's: the running one), the device
  // A checkpoint newer than this rank's own, received from another rank (newest_among_ranks.h):
  // its weights replace those prepare_locally() loaded, before the style is built.
  void take_received_weights(const TrainingCheckpoint& checkpoint);
  void build_step();  // optimizer, parallel style, scaler, sampler, schedule, heartbeat
  // The heartbeat's options for this run: as given, and for --on-failure continue told to every
  // rank and ending this rank's collectives instead of the process.
  dist::HeartbeatOptions heartbeat_options() const;
  void restore(const TrainingCheckpoint& checkpoint, const std::filesystem::path& file);  // exact resume
  // A checkpoint written by another number of processes (an elastic job re-formed): keep its global
  // batch through gradient accumulation when it divides, else rescale the learning rate.
  void adapt_to_world(const TrainingCheckpoint& checkpoint);
  // What the launcher said ended the round before, if this round follows one; `resumed_from`:
  // the checkpoint's world size, 0 for a fresh start.
  void expect_round_report(int resumed_from_world);
  void open_logs();  // also the run's checkpoints
  // Rank 0's: the --output folder, the observers (metrics.jsonl, TensorBoard, the console), the
  // model's FLOPs for their reports. Also on a rank that becomes rank 0 (trainer_reform.cpp).
  void open_leader_logs();
  void count_model_flops();
  void print_banner() const;
  void print_hints(std::ostream& out) const;

  // The arithmetic the step runs in, as bench-peak names it: optim::amp_dtype()'s, or "fp32" without --amp.
  std::string precision() const {
    if (!options.amp()) return "fp32";
    return optim::amp_dtype(device) == at::kHalf ? "fp16" : "bf16";
  }
  ModelRate model_rate(double images_per_s) const;

  bool leader() const { return comm->rank() == 0; }
  // Where the ranks meet outside the gradient exchange, as the style decides (lockstep.h).
  const Lockstep& ranks() const { return style->lockstep(); }
  int64_t global_batch() const { return options.batch_size() * comm->size() * accum_steps; }
  int64_t steps_per_epoch() const {
    const int64_t per_step = options.batch_size() * accum_steps;
    return (sampler->num_samples() + per_step - 1) / per_step;
  }
  int64_t global_step() const { return epoch * steps_per_epoch() + step_in_epoch; }

  template <typename F>
  void notify(F&& tell) {
    if (!leader()) return;
    for (auto& observer : options.observers()) tell(*observer);
  }

  // Where the next step stands, for train_step.
  StepPosition position() const {
    StepPosition at;
    at.epoch = epoch;
    at.step_in_epoch = step_in_epoch;
    at.number = global_step() + 1;
    at.accum_steps = accum_steps;
    at.rank = comm->rank();
    at.world_size = comm->size();
    return at;
  }

  // trainer_reform.cpp.
  bool continues_on_failure() const { return options.parallel().on_failure() == OnFailure::Continue; }
  // ConfigError where --on-failure continue cannot work; arms the communicator's abandonment.
  void prepare_to_continue();
  void keep_step_start();     // before each step
  void forget_step_start();   // the step in flight was dropped: back to where it started
  // Collective over the ranks left: the group re-formed without the lost rank(s), and every part
  // of the step rebuilt over it from the last completed step, held in memory.
  void go_on_without_lost();
  // Drops every part of the step that holds the group (the step, the heartbeat, the style, the
  // loader), before the group changes.
  void leave_group();
  // A replacement's join (WorldInfo::replacement), in join(): the running group admits it.
  void join_as_replacement();
  // Collective over the group and the replacements that asked (join_requests_asked): the grown
  // group formed, the last completed step's state sent to them, every part of the step rebuilt
  // over the grown group as go_on_without_lost does over a smaller one.
  void admit_replacements();
  // Rank 0, each step (--on-failure continue): how many replacements have asked to join so far.
  int64_t join_requests() const;
  // Rank 0, as the run ends: a replacement still waiting leaves (dist/joining.h's close_joining).
  void close_joining() const;
  // A replacement's side of admit_replacements' state: the state it takes in place of a resume.
  TrainingCheckpoint receive_state();
  // Collective after a join: every rank's weights and optimizer state compared with rank 0's,
  // bitwise (a digest each); InternalError naming the first rank that differs.
  void check_replicas_agree();
  // Both re-formations' end, over the new group: the step's parts rebuilt from `held` at its
  // world size, and the change told after the next step (`report`, since `began`).
  void rebuild_from(const TrainingCheckpoint& held, const MembershipReport& report, Clock::time_point began);
  // The rank this process's files are named by: its rank in the group the job started with, which
  // a replacement takes over from the rank it replaces.
  int file_rank() const { return joined_ranks.empty() ? comm->rank() : joined_ranks[static_cast<size_t>(comm->rank())]; }
  // Collective over the new group: where the ranks left differ by a step (`left.progress`), the
  // lowest that completed the furthest sends its state (`held`), which the others take in place of
  // their own. `rank_before`: this rank's in the group before, for the log.
  void take_furthest_state(const dist::Survivors& left, TrainingCheckpoint& held, int rank_before);
  // Runs `collective` (the epoch's end: sums, validation); under --on-failure continue, a loss
  // found in it re-forms the group and runs it again over the ranks left.
  template <typename F>
  auto going_on(F&& collective) {
    while (true) {
      try {
        return collective();
      } catch (const DistError& e) {
        if (!continues_on_failure()) throw;
        found_loss = FoundLoss{e.what(), Clock::now(), /*in_step=*/false};
      }
      go_on_without_lost();
    }
  }

  // trainer_step.cpp.
  // One optimizer step over the next accum_steps micro-batches of `batches` (fewer at the epoch's
  // end); returns the step's sums over all ranks, or nothing when the loader had none left.
  std::optional<MetricSums> step(data::DevicePrefetcher& batches);
  // Trains one epoch from step_in_epoch on: to its end, until max_steps or a stop request, or, under
  // --on-failure continue, until a loss drops the step in flight (found_loss says why).
  // `skipped` gets this rank's bad images of the pass.
  // Admitting: replacements asked to join (join_requests_asked): the caller admits them, then the
  // epoch goes on.
  enum class EpochEnd { Finished, Stopped, StepDropped, Admitting };
  EpochEnd train_epoch(MetricSums& sums, std::vector<data::SkippedSample>& skipped);
  // The loader of this epoch (from samples_in_epoch on) with the next one queued, if it comes.
  data::Loader& epoch_loader();
  // Who hears of each step's phases: the straggler watch, which tells the timeline.
  StepPhaseHook* phase_hook() const {
    return stragglers ? static_cast<StepPhaseHook*>(stragglers.get()) : timeline.get();
  }
  // Once the round's first step is done: rank 0 logs the change of round and tells the
  // observers; every rank marks it on its timeline.
  void report_round();
  // Names a slow rank in every rank's log (and rank 0's metrics).
  void report_straggler(StragglerReport slow);
  // Whether --checkpoint-every or --checkpoint-minutes asks for a checkpoint after this step. Not
  // after an epoch's last step: the epoch's own checkpoint follows its validation. Rank 0 decides;
  // under ZeRO, whose checkpoints every rank takes part in, every rank must know: rank 0's clock is
  // broadcast (one small collective a step, with --checkpoint-minutes only).
  bool periodic_checkpoint_due();

  // trainer.cpp.
  // One validation pass of `net` over the whole validation set, split over the ranks; reports it
  // as `phase`. Collective (apart: rank 0's pass alone, the others return nothing).
  // The model's pass first runs the style's before_evaluate(); the EMA's has no need to.
  MetricSums evaluate(models::ClassifierImpl& net, const std::string& phase);
  // Tells the observers about a finished train or val pass: `all` are its sums over all ranks (its
  // skipped images those of the whole pass), `skipped_here` this rank's. Throws DataError when
  // the pass had too many bad images, or no usable one (BadImages::finish).
  void report_pass(const std::string& phase, const MetricSums& all,
                   const std::vector<data::SkippedSample>& skipped_here, Clock::time_point start);
  std::string pass_name(const std::string& phase) const { return fmt::format("epoch {} {}", epoch, phase); }
  // Fills in what every report has: the position, and the scores of `all`.
  void score(Report& report, const MetricSums& all) const {
    place(report);
    fill_scores(report, all);
  }
  // Fills in where training stands: the epoch and the step.
  void place(Report& report) const {
    report.epoch = epoch;
    report.global_step = global_step();
  }
  // The state a checkpoint holds now (weights and optimizer state aliased, not copied).
  TrainingCheckpoint checkpoint_state();
  // Every rank: under ZeRO the optimizer state's shards gathered to rank 0, which then writes.
  void save_checkpoint(RunCheckpoints::Cause cause, BestModel best = BestModel::IfNone);
  // After a step without a checkpoint, with periodic ones: rank 0's writer made ready, once.
  void prepare_checkpoints();
  // Whether any rank had caught a stop signal when the step's sums were reduced (`all` carries the
  // votes), so that every rank stops after the same step whichever rank the signal reached.
  bool stop_agreed_in(const MetricSums& all) const;
  // Whether any rank has caught a stop signal by now: one small all-reduce (collective), once per
  // epoch; within an epoch each step's vote rides in its sums.
  bool any_rank_stopping();
  // This rank's vote: 1 once it has caught a stop signal.
  int64_t stop_vote() const { return stop_signals && stop_signals->received() != 0 ? 1 : 0; }
};

}  // namespace dpt::train
