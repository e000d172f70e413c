#include "dptrain/train/trainer.h"

#include <ATen/CPUGeneratorImpl.h>
#include <ATen/Parallel.h>
#include <fmt/format.h>
#include <torch/cuda.h>
#include <torch/nn/functional/loss.h>
#include <torch/nn/utils/clip_grad.h>
#include <torch/utils.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <filesystem>
#include <iostream>
#include <optional>
#include <string>
#include <vector>

#include "datasets.h"
#include "dptrain/common/cpu_platform.h"
#include "dptrain/common/error.h"
#include "dptrain/common/host_name.h"
#include "dptrain/compat/compat.h"
#include "dptrain/compat/pickle.h"
#include "dptrain/data/loader.h"
#include "dptrain/data/sampler.h"
#include "dptrain/dist/all_gather_strings.h"
#include "dptrain/dist/init.h"
#include "dptrain/models/inception.h"
#include "dptrain/models/multiply_adds.h"
#include "dptrain/models/registry.h"
#include "dptrain/parallel/convert_sync_batchnorm.h"
#include "dptrain/parallel/ps/options.h"
#include "dptrain/parallel/zero.h"
#include "dptrain/parallel/zero_stage2.h"
#include "dptrain/train/ps_server_role.h"
#include "dptrain/train/checkpoint/auto_resume.h"
#include "dptrain/train/checkpoint/checkpoint_file.h"
#include "dptrain/train/checkpoint/checkpoint_writer.h"
#include "dptrain/train/checkpoint/optimizer_state.h"
#include "dptrain/train/checkpoint/sharded_optimizer_state.h"
#include "dptrain/train/checkpoint/training_checkpoint.h"
#include "dptrain/train/amp.h"
#include "dptrain/train/bad_images.h"
#include "dptrain/train/grad_scaler.h"
#include "dptrain/train/logs/timeline.h"
#include "dptrain/train/lr_schedule.h"
#include "dptrain/train/model_ema.h"
#include "dptrain/train/stop_signals.h"
#include "dptrain/train/straggler_watch.h"
#include "local_setup.h"
#include "parallel_style.h"

namespace dpt::train {

namespace fs = std::filesystem;

namespace {

using Clock = std::chrono::steady_clock;

double seconds_since(Clock::time_point start) {
  return std::chrono::duration<double>(Clock::now() - start).count();
}

// Channels-last weights make convolutions pick NHWC kernels; the inputs follow the same layout.
void to_channels_last(torch::nn::Module& module) {
  for (auto& p : module.parameters()) {
    if (p.dim() == 4) p.set_data(p.data().contiguous(at::MemoryFormat::ChannelsLast));
  }
}

}  // namespace

struct Trainer::State {
  TrainOptions options;
  RunDatasets data;
  models::Classifier model{nullptr};
  std::shared_ptr<dist::Communicator> comm;  // the ranks that train (--mode ps: the workers)
  std::shared_ptr<dist::Communicator> job;   // every process of the job (--mode ps: the servers too)
  at::Device device{at::kCPU};
  std::shared_ptr<torch::optim::Optimizer> optimizer;
  // --zero 1 and 2: `optimizer` itself, each rank stepping its shard; checkpoints gather its state.
  std::shared_ptr<ZeroRedundancyOptimizer> zero1;
  std::shared_ptr<ZeroStage2Optimizer> zero2;
  bool sharded() const { return zero1 || zero2; }
  c10::impl::GenericDict zero_state = compat::string_dict();  // rank 0: gathered for the checkpoint being written
  std::unique_ptr<ParallelStyle> style;
  std::unique_ptr<GradScaler> scaler;
  std::unique_ptr<data::DistributedSampler> sampler;
  std::unique_ptr<LrSchedule> schedule;
  std::unique_ptr<BatchMixing> mixing;
  std::unique_ptr<ModelEma> ema;  // --model-ema
  std::unique_ptr<Timeline> timeline;  // --timeline: this rank's
  std::unique_ptr<StragglerWatch> stragglers;  // the step's phase hook, passing phases on to the timeline
  std::vector<std::string> hosts;              // each rank's, gathered when a straggler is first named
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
  // For the banner: where the run resumed from, and the newer files that did not read.
  std::vector<std::string> resume_notes;
  Clock::time_point last_checkpoint = Clock::now();
  std::unique_ptr<CheckpointWriter> checkpoints;  // rank 0's, when there is an output folder
  // For the reports (rank 0): a training image's FLOPs, 2 x 3 x the model's forward multiply-adds,
  // and the attainable FLOP/s of every unit the ranks compute on, when measured.
  double train_flop_per_image = 0;
  std::optional<double> run_peak_flop_per_s;

  explicit State(TrainOptions o) : options(std::move(o)) {}

  // The constructor's steps after prepare_locally(), in order.
  void join();                                                 // the process group(s), the device
  void build_step();                                           // optimizer, parallel style, scaler, sampler, schedule
  void restore(const TrainingCheckpoint& checkpoint, const fs::path& file);  // exact resume: position, optimizer, RNG
  // A checkpoint written by another number of processes (an elastic job re-formed): keep its global
  // batch through gradient accumulation when it divides, else rescale the learning rate.
  void adapt_to_world(const TrainingCheckpoint& checkpoint);
  void open_logs();
  void count_model_flops();
  // The arithmetic the step runs in, as bench-peak names it: amp_dtype()'s, or "fp32" without --amp.
  std::string precision() const {
    if (!options.amp()) return "fp32";
    return amp_dtype(device) == at::kHalf ? "fp16" : "bf16";
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

  // `loss` is the logits' (what the metrics report); `objective`, what backward differentiates,
  // adds the auxiliary classifiers' weighted losses (GoogLeNet, Inception v3).
  struct Forward {
    at::Tensor logits, loss, objective;
  };
  // The training forward pass and losses, in the precision --amp asks for: bf16 autocast on the
  // CPU, fp16 on CUDA. The losses are computed in float32 outside autocast. `targets`: class
  // indices, or soft targets [N, classes] of a mixed batch.
  Forward train_forward(const at::Tensor& images, const at::Tensor& targets) {
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

  // The eval-mode logits of `net` (the model or its EMA), in --amp's precision, as float32.
  at::Tensor eval_logits(models::ClassifierImpl& net, const at::Tensor& images) const {
    compat::AutocastGuard autocast(device.type(), amp_dtype(device), options.amp());
    return net.forward(images).to(at::kFloat);
  }

  // One validation pass of `net` over the whole validation set, split over the ranks; reports it
  // as `phase`. Collective (apart: rank 0's pass alone, the others return nothing).
  // The model's pass first runs the style's before_evaluate(); the EMA's has no need to.
  MetricSums evaluate(models::ClassifierImpl& net, const std::string& phase);

  // Cross-entropy against class indices or soft (mixed) targets, with --label-smoothing.
  at::Tensor criterion(const at::Tensor& logits, const at::Tensor& targets) const {
    namespace F = torch::nn::functional;
    return F::cross_entropy(logits, targets,
                            F::CrossEntropyFuncOptions().label_smoothing(options.loss().label_smoothing()));
  }

  // --mixup-alpha, --cutmix-alpha: mixes micro-batch `k` of this step in place and returns its soft
  // targets. The draws depend on (seed, epoch, step, micro-batch, rank) only, so a resumed run
  // draws what an uninterrupted one would.
  at::Tensor mix(at::Tensor& images, const at::Tensor& labels, int64_t k) const {
    constexpr uint64_t kMixingStream = 0x6d6978696e67;  // apart from the per-sample crop streams
    data::SampleRng rng(options.seed() ^ kMixingStream, epoch,
                        (step_in_epoch * accum_steps + k) * comm->size() + comm->rank());
    return mixing->apply(images, labels, mixing->draw(rng, images.size(2), images.size(3)));
  }

  std::pair<at::Tensor, at::Tensor> to_device(const data::Batch& batch) const {
    auto images = batch.images.to(device, /*non_blocking=*/true);
    if (options.channels_last()) images = images.contiguous(at::MemoryFormat::ChannelsLast);
    return {images, batch.labels.to(device, /*non_blocking=*/true)};
  }

  data::LoaderOptions loader_options() const {
    return data::LoaderOptions()
        .batch_size(options.batch_size())
        .threads(options.data().workers())
        .bad_image_policy(options.data().bad_images())
        .pin_memory(device.is_cuda());
  }

  void print_banner() const;
  void print_hints(std::ostream& out) const;
  // Tells the observers about a finished train or val pass: `all` are its sums over all ranks (its
  // skipped images those of the whole pass), `skipped_here` this rank's. Throws DataError when
  // the pass had too many bad images, or no usable one (BadImages::finish).
  void report_pass(const std::string& phase, const MetricSums& all, const std::vector<data::SkippedSample>& skipped_here,
                   Clock::time_point start);
  std::string pass_name(const std::string& phase) const { return fmt::format("epoch {} {}", epoch, phase); }
  // Fills in what every report has: the position, and the scores of `all`.
  void score(Report& report, const MetricSums& all) const {
    report.epoch = epoch;
    report.global_step = global_step();
    report.loss = all.loss();
    report.acc1 = all.top1_percent();
    report.acc5 = all.top5_percent();
  }
  // Why a checkpoint is written: a periodic one is skipped while the previous write is still in
  // flight; the others wait for it.
  enum class CheckpointCause { Periodic, Epoch, Stop };
  void save_checkpoint(CheckpointCause cause, bool is_best);
  // Rank 0's writer, made on first use (removing what killed writes left).
  CheckpointWriter& checkpoint_writer();
  // The state a checkpoint holds now (weights and optimizer state aliased, not copied).
  TrainingCheckpoint checkpoint_state();
  // After the first step, with periodic checkpoints: the writer's host memory made ready in the
  // background, so that the first checkpoint pauses training no longer than the next ones.
  void prepare_checkpoints();
  bool checkpoints_prepared = false;
  // Logs the writes that have ended (and puts them on the timeline's checkpoint track).
  void report_checkpoints();
  // Waits for the write in flight and reports it.
  void finish_checkpoints();
  std::optional<CheckpointWrite> last_write;  // the newest write that ended
  // Whether any rank had caught a stop signal when the step's sums were reduced (`all` carries the
  // votes), so that every rank stops after the same step whichever rank the signal reached.
  bool stop_agreed_in(const MetricSums& all) const {
    if (all.stop_votes > 0 && leader() && options.log() != nullptr) {
      *options.log() << "stopping on request after global step " << global_step() << " (a stop signal reached "
                     << all.stop_votes << " rank(s)); writing the checkpoint" << std::endl;
    }
    return all.stop_votes > 0;
  }
  // Whether any rank has caught a stop signal by now: one small all-reduce (collective), once per
  // epoch; within an epoch each step's vote rides in its sums.
  bool any_rank_stopping() {
    if (!stop_signals) return false;
    MetricSums vote;
    vote.stop_votes = stop_vote();
    return stop_agreed_in(ranks().sum(vote));
  }
  // This rank's vote: 1 once it has caught a stop signal.
  int64_t stop_vote() const { return stop_signals && stop_signals->received() != 0 ? 1 : 0; }
  // Whether --checkpoint-every or --checkpoint-minutes asks for a checkpoint after this step. Not
  // after an epoch's last step: the epoch's own checkpoint follows its validation. Rank 0 decides;
  // under ZeRO, whose checkpoints every rank takes part in, every rank must know: rank 0's clock is
  // broadcast (one small collective a step, with --checkpoint-minutes only).
  bool periodic_checkpoint_due() {
    const CheckpointOptions& c = options.checkpoint();
    if ((!leader() && !sharded()) || step_in_epoch == steps_per_epoch()) return false;
    const bool steps_due = c.every_steps() && global_step() % *c.every_steps() == 0;
    bool time_due = leader() && c.every_minutes() && seconds_since(last_checkpoint) >= *c.every_minutes() * 60;
    if (sharded() && c.every_minutes()) {
      at::Tensor flag = at::full({1}, time_due ? 1 : 0, at::kInt).to(comm->device());
      comm->broadcast(flag, 0);
      time_due = flag.cpu().item<int>() != 0;
    }
    return steps_due || time_due;
  }
  // After a backward that reduced: its buckets' all-reduces on the timeline's communication track,
  // and the wait for them after backward's compute on the training track.
  void trace_reduction(int64_t at_step) {
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
  // Who hears of each step's phases: the straggler watch, which tells the timeline.
  StepPhaseHook* phase_hook() const {
    return stragglers ? static_cast<StepPhaseHook*>(stragglers.get()) : timeline.get();
  }
  // Names a slow rank in every rank's log (and rank 0's metrics).
  void report_straggler(StragglerReport slow);
  // One optimizer step over the next accum_steps micro-batches of `loader` (fewer at the epoch's
  // end); returns the step's sums over all ranks, or nothing when the loader had none left.
  std::optional<MetricSums> step(data::Loader& loader);
  // Trains one epoch from step_in_epoch on; returns false when max_steps stopped it early.
  // `skipped` gets this rank's bad images of the pass.
  bool train_epoch(MetricSums& sums, std::vector<data::SkippedSample>& skipped);
};

Trainer::Trainer(TrainOptions options) : state_(std::make_unique<State>(std::move(options))) {
  State& s = *state_;
  DPT_CHECK(!serves_parameters(s.options), ConfigError, "this process is one of the --mode ps job's ",
            s.options.parallel().ps().servers(), " parameter server(s) (its last ranks): it serves (serve_parameters), ",
            "it does not train");
  LocalSetup local = prepare_locally(s.options);
  s.data = std::move(local.data);
  s.model = local.model;
  // Then the process group, and what needs it.
  s.join();
  s.build_step();
  s.epoch = s.options.start_epoch();
  const FoundCheckpoint& resumed = local.resumed;
  for (const auto& skipped : resumed.passed_over) s.resume_notes.push_back("warning: " + skipped);
  if (resumed.checkpoint) {
    s.restore(*resumed.checkpoint, resumed.file);
    s.resume_notes.push_back(str("resuming from ", resumed.file.string(), " (epoch ", s.epoch, ", step ",
                                 s.step_in_epoch, " of it, global step ", s.global_step(), ")"));
  } else if (s.options.checkpoint().resume() == kResumeAuto) {
    s.resume_notes.push_back(str("--resume auto: no checkpoint in ", s.options.checkpoint().output_dir(),
                                 " yet; starting fresh"));
  }
  s.style->start();
  s.open_logs();
  s.print_banner();
}

namespace {

bool has_batch_norm_statistics(const torch::nn::Module& model) {
  for (const auto& buffer : model.named_buffers()) {
    const auto& key = buffer.key();
    if (key.size() >= 12 && key.compare(key.size() - 12, 12, "running_mean") == 0) return true;
  }
  return false;
}

}  // namespace

void Trainer::State::join() {
  const ParallelOptions& parallel = options.parallel();
  job = comm = dist::init_process_group(parallel.dist());
  // --mode ps: this process is a worker (serves_parameters() said so); the workers train as a
  // group of their own, and the job's communicator reaches the servers.
  if (parallel.mode() == ParallelMode::Ps) {
    comm = dist::new_group(*job, 0, ps::Roles(job->size(), parallel.ps().servers()).workers(), parallel.dist());
  }
  device = comm->device();
  if (parallel.gpu()) {
    DPT_CHECK(torch::cuda::is_available(), ConfigError, "rank ", comm->rank(), ": --gpu ", *parallel.gpu(),
              " given but no CUDA device is visible");
    device = at::Device(at::kCUDA, static_cast<c10::DeviceIndex>(*parallel.gpu()));
  }
  // DataParallel's model lives on its first replica's device.
  if (parallel.mode() == ParallelMode::Dp) device = data_parallel_devices(parallel).front();
  model->to(device);
  if (options.channels_last()) to_channels_last(*model);
  if (parallel.sync_bn()) {
    // A TorchScript model's batch norms are compiled into its forward: there is nothing to swap,
    // and training on with local statistics would silently ignore the flag.
    DPT_CHECK(convert_sync_batchnorm(*model, comm) > 0 || !has_batch_norm_statistics(*model), ConfigError,
              "--sync-bn cannot convert the batch norms of ", options.arch(), ": they are compiled into its "
              "forward, where no C++ layer can replace them. Train it without --sync-bn");
  }
}

void Trainer::State::build_step() {
  const TrainOptions& o = options;
  const double lr = o.schedule().base_lr();
  const auto make_local = [&](std::vector<torch::optim::OptimizerParamGroup> shard) {
    return make_optimizer(std::move(shard), o.optimizer(), lr);
  };
  if (o.parallel().zero_stage() == 1) {
    zero1 = std::make_shared<ZeroRedundancyOptimizer>(comm, optimizer_param_groups(*model, o.optimizer(), lr), make_local);
    optimizer = zero1;
  } else if (o.parallel().zero_stage() == 0) {
    optimizer = make_optimizer(*model, o.optimizer(), lr);
  }
  style = make_parallel_style(o, model, optimizer, comm, job);
  if (o.parallel().zero_stage() == 2) {
    // It steps the parts of the gradients the style's reducer keeps, so it comes after the style.
    zero2 = std::make_shared<ZeroStage2Optimizer>(comm, *style->reducer(),
                                                  optimizer_param_groups(*model, o.optimizer(), lr), make_local);
    optimizer = zero2;
  }
  accum_steps = o.accum_steps();
  DPT_CHECK(accum_steps == 1 || style->accumulates(), ConfigError,
            "--accum-steps needs --mode ddp or dp: the Horovod style reduces the gradients in every backward");
  // Loss scaling keeps fp16 gradients from underflowing; bf16 has float32's range and needs none.
  scaler = std::make_unique<GradScaler>(GradScalerOptions().enabled(o.amp() && amp_needs_loss_scaling(device)), comm);
  DPT_CHECK(!zero2 || !scaler->is_enabled(), ConfigError, "--zero 2 cannot scale fp16 losses yet: the scaler "
            "unscales whole gradients, and ZeRO-2 keeps parts of them. Use --zero 1 with --amp on this device");
  sampler = std::make_unique<data::DistributedSampler>(
      data.train->size(),
      data::SamplerOptions(comm->size(), comm->rank()).seed(o.seed()).repetitions(o.data().repeated_augmentations()));
  schedule = std::make_unique<LrSchedule>(LrScheduleOptions(o.schedule()).global_batch(global_batch()).epochs(o.epochs()),
                                          steps_per_epoch());
  mixing = std::make_unique<BatchMixing>(o.loss().mixing(), data.train->num_classes());
  if (o.model_ema()) ema = std::make_unique<ModelEma>(model, ema_decay(*o.model_ema(), global_batch(), o.epochs()));
}

void Trainer::State::restore(const TrainingCheckpoint& cp, const fs::path& file) {
  epoch = cp.epoch;
  step_in_epoch = cp.step_in_epoch;
  samples_in_epoch = cp.samples_in_epoch;
  if (cp.world_size > 0 && cp.world_size != comm->size()) {
    adapt_to_world(cp);
  } else {
    DPT_CHECK(cp.step_in_epoch == 0 || cp.global_batch == global_batch(), ConfigError, "rank ", comm->rank(),
              ": checkpoint ", file.string(), " stopped mid-epoch with a global batch of ", cp.global_batch,
              " samples; resume it with the same --batch-size and --accum-steps (now a global batch of ",
              global_batch(), ")");
  }
  best_acc1 = cp.best_acc1;
  sampler->load_state(cp.sampler);
  load_optimizer_state_dict(*optimizer, cp.optimizer);
  if (scaler->is_enabled() && cp.scaler.size() > 0) scaler->load_state_dict(cp.scaler);
  if (ema && !cp.model_ema.is_empty()) {
    ema->load_state_dict(cp.model_ema);
  } else if (ema) {
    resume_notes.push_back(str("checkpoint ", file.string(), " has no model EMA: the average starts from its weights"));
  }
  if (cp.rng_state.numel() > 0) {
    at::Generator generator = at::detail::getDefaultCPUGenerator();  // shares the default's state
    generator.set_state(cp.rng_state);
  }
}

void Trainer::State::adapt_to_world(const TrainingCheckpoint& cp) {
  const int64_t per_micro_step = options.batch_size() * comm->size();
  const bool kept = style->accumulates() && cp.global_batch % per_micro_step == 0;
  if (kept) accum_steps = cp.global_batch / per_micro_step;
  // The rate follows the global batch from the batch the base rate was set for: --lr's reference
  // batch, or without linear scaling the checkpoint's record of it (the first run's global batch),
  // so that a job that shrinks and grows back returns to its rate.
  LrScheduleOptions lr(options.schedule());
  if (!lr.reference_batch()) lr.reference_batch(cp.lr_reference_batch > 0 ? cp.lr_reference_batch : cp.global_batch);
  const double before = scaled_lr(LrScheduleOptions(lr).global_batch(cp.global_batch));
  schedule = std::make_unique<LrSchedule>(lr.global_batch(global_batch()).epochs(options.epochs()), steps_per_epoch());
  // The position in the new steps, for the schedule; the data continues from samples_in_epoch.
  step_in_epoch = samples_in_epoch / global_batch();
  std::string how = kept ? str("the global batch stays ", cp.global_batch, " through ", accum_steps,
                               " accumulation step(s) per optimizer step; the learning rate is unchanged")
                         : str("a global batch of ", cp.global_batch, " does not split into ", comm->size(),
                               " process(es) x ", options.batch_size(), style->accumulates() ? "" : " (no accumulation in this mode)",
                               ", so it becomes ", global_batch(), " and the learning rate is rescaled by ",
                               global_batch(), "/", cp.global_batch, ": ", before, " -> ", schedule->peak_lr());
  resume_notes.push_back(str("world size ", cp.world_size, " -> ", comm->size(), ": ", how,
                             samples_in_epoch > 0 ? str("; the rest of epoch ", epoch, " (from sample ",
                                                        samples_in_epoch, ") is re-sharded over ", comm->size(),
                                                        " process(es)")
                                                  : ""));
}

void Trainer::State::open_logs() {
  if (!options.timeline().empty()) {
    timeline = std::make_unique<Timeline>(timeline_path(options.timeline(), comm->rank()), comm->rank());
  }
  if (options.stragglers().threshold() > 0 && comm->size() > 1) {
    stragglers = std::make_unique<StragglerWatch>(options.stragglers(), comm->rank(), comm->size(), timeline.get());
  }
  if (!leader()) return;
  const std::string& output_dir = options.checkpoint().output_dir();
  if (!output_dir.empty()) fs::create_directories(output_dir);
  if (options.logs()) {
    LogOptions logs = *options.logs();
    if (logs.output_dir().empty()) logs.output_dir(output_dir);
    for (auto& observer : make_observers(logs)) options.observers().push_back(std::move(observer));
  }
  count_model_flops();
}

void Trainer::State::count_model_flops() {
  train_flop_per_image = 6.0 * models::forward_multiply_adds(model, data.image_size);
  if (!options.peak_flop_per_s()) return;
  const std::optional<double> per_unit = options.peak_flop_per_s()(device.is_cuda() ? "cuda" : "cpu", precision());
  if (!per_unit) return;
  // The peak is per CPU thread (per GPU on CUDA): every rank computes on its threads.
  const int units_per_rank = device.is_cpu() ? at::get_num_threads() : 1;
  run_peak_flop_per_s = *per_unit * units_per_rank * comm->size();
}

ModelRate Trainer::State::model_rate(double images_per_s) const {
  ModelRate rate;
  rate.flop_per_s = images_per_s * train_flop_per_image;
  if (run_peak_flop_per_s) rate.mfu = rate.flop_per_s / *run_peak_flop_per_s;
  return rate;
}

Trainer::~Trainer() {
  if (state_->comm) state_->notify([](TrainObserver& o) { o.on_finish(); });
}

int Trainer::rank() const { return state_->comm->rank(); }
int Trainer::world_size() const { return state_->comm->size(); }

void Trainer::State::print_banner() const {
  if (!leader() || options.log() == nullptr) return;
  auto& out = *options.log();
  out << "dptrain train: " << options.arch() << ", " << comm->size() << " process(es), batch " << options.batch_size();
  // Under --mode dp one process drives the replicas: -b is the batch of a step, as nn.DataParallel's.
  if (options.parallel().mode() == ParallelMode::Dp) {
    out << " per step (split over the replicas)";
  } else {
    out << " per process";
    if (accum_steps > 1) out << " x " << accum_steps << " accumulation steps";
    out << " (" << global_batch() << " global)";
  }
  out << ", lr " << schedule->peak_lr();
  const LrScheduleOptions& lr = options.schedule();
  if (lr.reference_batch()) out << " (" << lr.base_lr() << " x " << global_batch() << "/" << *lr.reference_batch() << ")";
  out << ", " << to_string(options.optimizer().kind());
  if (sharded()) {
    int64_t elements = 0;
    for (const auto& group : optimizer->param_groups()) {
      for (const auto& p : group.params()) elements += p.numel();
    }
    out << " (ZeRO-" << options.parallel().zero_stage() << ": each process keeps its shard's state"
        << (zero2 ? " and reduced gradients" : "") << ", rank 0 that of " << (zero1 ? zero1->local_numel() : zero2->local_numel())
        << " of " << elements << " weights)";
  }
  out << ", " << (lr.warmup_method() == WarmupMethod::Constant ? "constant " : "") << "warm-up "
      << lr.warmup_epochs() << " epoch(s), " << to_string(lr.decay()) << " schedule"
      << (lr.per_epoch() ? " stepped per epoch" : "") << ", amp "
      << (options.amp() ? precision() : "off") << ", device "
      << device.str() << ", " << style->describe();
  if (comm->size() > 1) out << " over " << comm->transport();
  out << "\n"
      << "data: " << data.kind << ", " << data.train->size() << " training and " << data.val->size()
      << " validation images, " << data.train->num_classes() << " classes, " << steps_per_epoch()
      << " steps per epoch" << std::endl;
  out << fmt::format("compute: {:.3g} G multiply-adds per image forward at {} px; ", train_flop_per_image / 6e9,
                     data.image_size)
      << (run_peak_flop_per_s ? fmt::format("MFU against {:.0f} GFLOP/s ({} peak, bench-peak)",
                                            *run_peak_flop_per_s / 1e9, precision())
                              : "for MFU, measure this machine's peak once with dptrain bench-peak")
      << std::endl;
  print_hints(out);
  for (const auto& note : resume_notes) out << note << std::endl;
}

// Once per run, what would make this machine train faster, where it pays.
void Trainer::State::print_hints(std::ostream& out) const {
  if (device.is_cpu()) {
    const BlasLibrary blas = blas_in_use();
    if (blas.is_reference()) out << "warning: " << blas.advice() << std::endl;
    const CpuFeatures cpu = cpu_features();
    if (!options.amp() && cpu.has_bf16_units()) {
      out << "hint: this CPU has bf16 matrix units (" << cpu.describe() << "): --amp --channels-last trains in "
          << "bf16 on them, at about twice fp32's images/s for convolutional networks (docs/benchmarks.md)" << std::endl;
    } else if (options.amp() && !cpu.has_bf16_units()) {
      // Without them LibTorch converts every bf16 operand in software: a ResNet-18 step measured
      // 10x slower than in fp32 on an AVX2-only CPU.
      out << "warning: --amp trains in bf16, but this CPU has no bf16 matrix units (" << cpu.describe()
          << "): LibTorch emulates bf16 here, several times slower than fp32 (docs/benchmarks.md); leave out --amp "
          << "on this machine" << std::endl;
    }
  } else if (device.is_cuda() && !options.amp()) {
    out << "hint: --amp trains in fp16 with loss scaling on the GPU's tensor cores, usually several times fp32's "
        << "rate (add --channels-last for convolutional networks)" << std::endl;
  }
}

std::optional<MetricSums> Trainer::State::step(data::Loader& loader) {
  const auto step_began = Clock::now();
  const int64_t at_step = global_step() + 1;  // steps count from 1 in logs and messages
  StepPhaseHook* phases = phase_hook();
  std::vector<data::Batch> micro_batches;
  while (static_cast<int64_t>(micro_batches.size()) < accum_steps) {
    auto batch = loader.next();
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
  local.skipped_images = loader.skipped_count() - skipped_stepped;
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
      if (zero2) {
        zero2->clip_grad_norm(*max_norm);  // the parameters' .grad are unset: ZeRO-2 holds the parts
      } else {
        torch::nn::utils::clip_grad_norm_(model->parameters(), *max_norm);
      }
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
  data::Loader loader(data.train, sampler->indices_from(samples_in_epoch), epoch, loader_options());
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
    const std::optional<MetricSums> stepped = step(loader);
    if (!stepped) break;
    const MetricSums& all = *stepped;
    sums.add(all);
    // Every rank has the same sums: past the bound, all stop here, before this step's checkpoint.
    if (all.skipped_images > 0) {
      bad_images.check({pass_name("train") + fmt::format(", step {}", global_step()), sums.skipped_images,
                        sums.count, data.train->size(), loader.skipped()});
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
      save_checkpoint(CheckpointCause::Periodic, /*is_best=*/false);
    } else if (!checkpoints_prepared) {
      prepare_checkpoints();
    }
    report_checkpoints();
  }
  skipped = loader.skipped();
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

CheckpointWriter& Trainer::State::checkpoint_writer() {
  if (!checkpoints) {
    checkpoints = std::make_unique<CheckpointWriter>(
        CheckpointWriterOptions().background(options.checkpoint().in_background()));
    for (const fs::path& file : remove_unfinished_writes(options.checkpoint().output_dir())) {
      if (options.log() != nullptr) {
        *options.log() << "checkpoint: removed " << file.string() << ", a write its killed process left unfinished"
                       << std::endl;
      }
    }
  }
  return *checkpoints;
}

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
  // Under ZeRO, what save_checkpoint gathered (before the first checkpoint: nothing, so the
  // writer's prepared memory falls short by the optimizer state).
  cp.optimizer = sharded() ? zero_state : optimizer_state_dict(*optimizer);
  cp.scaler = scaler->state_dict();
  if (ema) cp.model_ema = ema->state_dict();
  at::Generator generator = at::detail::getDefaultCPUGenerator();
  cp.rng_state = generator.get_state();
  return cp;
}

void Trainer::State::prepare_checkpoints() {
  checkpoints_prepared = true;
  const auto& c = options.checkpoint();
  if (!leader() || c.output_dir().empty() || !(c.every_steps() || c.every_minutes())) return;
  checkpoint_writer().prepare(checkpoint_state().to_ivalue());
}

void Trainer::State::save_checkpoint(CheckpointCause cause, bool is_best) {
  if (options.checkpoint().output_dir().empty()) return;
  // Every rank sends its shard of the optimizer state; rank 0 writes the whole.
  if (zero1) zero_state = consolidated_optimizer_state_dict(*zero1, /*to=*/0);
  if (zero2) zero_state = consolidated_optimizer_state_dict(*zero2, /*to=*/0);
  if (!leader()) return;
  CheckpointWriter& writer = checkpoint_writer();
  const auto snapshot = span_of(timeline.get(), "checkpoint", {{"step", global_step()}});
  style->gather_state();
  const TrainingCheckpoint cp = checkpoint_state();
  CheckpointRequest request;
  request.state = cp.to_ivalue();
  request.dir = options.checkpoint().output_dir();
  request.step = global_step();
  if (cause == CheckpointCause::Epoch) request.epoch_done = epoch;
  request.keep = options.checkpoint().keep();
  request.best = is_best;
  const int64_t in_flight = writer.last_step();
  if (writer.submit(std::move(request), cause == CheckpointCause::Periodic ? WhenBusy::Skip : WhenBusy::Wait)) {
    last_checkpoint = Clock::now();
  } else if (options.log() != nullptr) {
    *options.log() << "checkpoint: none after step " << global_step() << ": the write of step " << in_flight
                   << " is still in flight (writes take longer than --checkpoint-every/--checkpoint-minutes "
                      "leave them)"
                   << std::endl;
  }
}

void Trainer::State::report_checkpoints() {
  if (!checkpoints) return;
  for (const CheckpointWrite& write : checkpoints->finished()) {
    last_write = write;
    if (timeline) {
      timeline->add(Timeline::Track::Checkpoint, "checkpoint write", write.began, write.ended, {{"step", write.step}});
    }
    if (options.log() == nullptr) continue;
    // What a checkpoint costs, to choose --checkpoint-every/--checkpoint-minutes by.
    if (write.ok()) {
      *options.log() << fmt::format("checkpoint: wrote {} ({:.1f} MB) in {:.2f} s; training paused {:.2f} s",
                                    write.file.string(), static_cast<double>(write.bytes) / 1e6, write.write_s(),
                                    write.paused_s)
                     << std::endl;
    } else {
      *options.log() << "checkpoint: the checkpoint of step " << write.step << " was not written: " << write.error
                     << ". The files it would have replaced are kept; training goes on" << std::endl;
    }
  }
}

void Trainer::State::finish_checkpoints() {
  if (!checkpoints) return;
  checkpoints->wait();
  report_checkpoints();
}

TrainResult Trainer::train() {
  State& s = *state_;
  TrainResult result;
  if (!s.options.checkpoint().stop_signals().empty()) {
    s.stop_signals = std::make_unique<StopSignals>(s.options.checkpoint().stop_signals());
  }
  while (s.epoch < s.options.epochs()) {
    const auto start = Clock::now();
    MetricSums sums;
    std::vector<data::SkippedSample> skipped;
    const bool finished = s.train_epoch(sums, skipped);
    if (!finished) {
      s.save_checkpoint(State::CheckpointCause::Stop, /*is_best=*/false);
      s.finish_checkpoints();
      // The other ranks wait for rank 0's checkpoint, so that no process exits before it is whole.
      if (s.stop_agreed) s.ranks().barrier();
      break;
    }
    // The whole pass's bad images, also those of batches after the last step (or of a pass whose
    // every batch was bad): the steps carried only their own.
    sums.skipped_images = s.ranks().sum(static_cast<int64_t>(skipped.size()));
    // A run stopped after an epoch's last step resumes into an empty pass: nothing to report.
    // (`sums` holds every rank's counts, so all ranks skip alike.)
    if (sums.count > 0 || sums.skipped_images > 0) s.report_pass("train", sums, skipped, start);

    {
      const auto validating = span_of(s.timeline.get(), "validation", {{"epoch", s.epoch + 1}});
      result.last_val = evaluate();
    }
    if (s.ema) {
      const auto validating = span_of(s.timeline.get(), "validation (EMA)", {{"epoch", s.epoch + 1}});
      result.last_val_ema = s.evaluate(*s.ema->module(), "val_ema");
    }
    const double acc1 = result.last_val.top1_percent();
    const bool is_best = acc1 > s.best_acc1;
    s.best_acc1 = std::max(s.best_acc1, acc1);
    ++s.epoch;
    s.step_in_epoch = 0;
    s.samples_in_epoch = 0;
    s.save_checkpoint(State::CheckpointCause::Epoch, is_best);
    s.report_checkpoints();
    if (s.options.max_steps() && s.global_step() >= *s.options.max_steps()) break;
    // A stop signal that came during validation: the epoch's checkpoint is written, so stop now
    // rather than after the next epoch's first step.
    if (s.any_rank_stopping()) {
      s.stop_agreed = true;
      s.finish_checkpoints();
      s.ranks().barrier();
      break;
    }
  }
  s.finish_checkpoints();
  // Mid-run failures are logged and training goes on; the run's last checkpoint missing is an
  // error, since nothing newer will replace it.
  DPT_CHECK(!s.last_write || s.last_write->ok(), CheckpointError, "the last checkpoint (step ",
            s.last_write ? s.last_write->step : 0, ") was not written: ",
            s.last_write ? s.last_write->error : "", "; the newest checkpoint in ",
            s.options.checkpoint().output_dir(), " is an older one");
  s.stop_signals.reset();
  result.stopped_on_request = s.stop_agreed;
  result.epochs_done = s.epoch;
  result.global_step = s.global_step();
  result.best_acc1 = s.best_acc1;
  return result;
}

MetricSums Trainer::evaluate() {
  state_->style->before_evaluate();
  return state_->evaluate(*state_->model, "val");
}

MetricSums Trainer::State::evaluate(models::ClassifierImpl& net, const std::string& phase) {
  const auto start = Clock::now();
  net.eval();
  torch::NoGradGuard no_grad;
  if (!ranks().validates()) return {};
  data::Loader loader(data.val, ranks().validation_indices(data.val->size()), /*epoch=*/0, loader_options());
  MetricSums local;
  while (auto batch = loader.next()) {
    auto [images, labels] = to_device(*batch);
    const at::Tensor logits = eval_logits(net, images);
    // Per-sample losses in float64: the sum then depends on the samples, not on how the ranks
    // batched them (a float32 batch mean rounds differently for every batch composition).
    const auto loss = criterion(logits.to(at::kDouble), labels);
    local.add(logits, labels, loss.item<double>());
  }
  local.skipped_images = loader.skipped_count();
  const MetricSums all = ranks().sum(local);
  report_pass(phase, all, loader.skipped(), start);
  return all;
}

void Trainer::State::report_pass(const std::string& phase, const MetricSums& all,
                                 const std::vector<data::SkippedSample>& skipped_here, Clock::time_point start) {
  EpochReport report;
  score(report, all);
  report.phase = phase;
  report.samples = all.count;
  report.seconds = seconds_since(start);
  report.images_per_s = report.seconds > 0 ? static_cast<double>(all.count) / report.seconds : 0.0;
  if (phase == "train") report.model_rate = model_rate(report.images_per_s);
  report.skipped_images = all.skipped_images;
  notify([&](TrainObserver& o) { o.on_epoch(report); });
  const int64_t images = phase == "train" ? data.train->size() : data.val->size();
  const std::string line = bad_images.finish({pass_name(phase), all.skipped_images, all.count, images, skipped_here});
  if (!line.empty() && options.log() != nullptr) *options.log() << line << std::endl;
}

}  // namespace dpt::train
