// Building a training run, the Trainer's constructor in steps (trainer_state.h): the process
// group and the device, the step's parts, a resume, the logs, and the banner.
#include "trainer_state.h"

#include <ATen/Parallel.h>
#include <fmt/format.h>

#include <filesystem>
#include <iostream>
#include <string>
#include <vector>

#include "dptrain/common/cpu_platform.h"
#include "dptrain/common/environment.h"
#include "dptrain/common/error.h"
#include "dptrain/common/round_end.h"
#include "dptrain/compat/onednn.h"
#include "dptrain/dist/init.h"
#include "dptrain/models/multiply_adds.h"
#include "dptrain/parallel/convert_sync_batchnorm.h"
#include "dptrain/train/checkpoint/optimizer_state.h"
#include "dptrain/train/logs/jsonl_observer.h"
#include "dptrain/train/logs/observers.h"
#include "dptrain/train/style_traits.h"
#include "local_setup.h"

namespace dpt::train {

namespace fs = std::filesystem;

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
  const StyleTraits& traits = style_traits(parallel.mode());
  replacement = dist::detect_world(Environment::current(), parallel.dist().world()).replacement;
  if (replacement) {
    join_as_replacement();
  } else {
    job = dist::init_process_group(parallel.dist());
  }
  comm = traits.trainers(job, parallel);
  device = traits.model_device(rank_device(parallel, *comm), parallel);
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

void Trainer::State::take_received_weights(const TrainingCheckpoint& checkpoint) {
  // The data were opened with this rank's seed: another seed would mean another synthetic set and
  // other augmentations than the ranks that resumed from their own file.
  DPT_CHECK(checkpoint.seed == options.seed(), ConfigError, "rank ", comm->rank(), ": the checkpoint received from ",
            "another rank was trained with --seed ", checkpoint.seed, ", this rank was started with --seed ",
            options.seed(), ": start every rank with the run's seed");
  DPT_CHECK(checkpoint.arch.empty() || checkpoint.arch == options.arch(), ConfigError, "rank ", comm->rank(),
            ": the checkpoint received from another rank is of ", checkpoint.arch, ", this rank trains ",
            options.arch());
  torch::NoGradGuard no_grad;
  models::load_state_dict(*model, checkpoint.state_dict);
}

void Trainer::State::build_step() {
  const TrainOptions& o = options;
  style = style_kind(o.parallel().mode()).make({o, model, comm, job});
  optimizer = style->optimizer();
  sharded = style->sharded_optimizer();
  accum_steps = o.accum_steps();
  // Loss scaling keeps fp16 gradients from underflowing; bf16 has float32's range and needs none.
  scaler = std::make_unique<optim::GradScaler>(
      optim::GradScalerOptions().enabled(o.amp() && optim::amp_needs_loss_scaling(device)), comm);
  DPT_CHECK(!sharded || sharded->holds_whole_gradients() || !scaler->is_enabled(), ConfigError,
            "--zero 2 cannot scale fp16 losses yet: the scaler unscales whole gradients, and ZeRO-2 keeps parts of "
            "them. Use --zero 1 with --amp on this device");
  sampler = std::make_unique<data::DistributedSampler>(
      data.train->size(),
      data::SamplerOptions(comm->size(), comm->rank())
          .seed(o.seed())
          .repetitions(o.data().repeated_augmentations())
          .shard_sizes(data.train_shard_sizes)
          .open_shards(o.data().open_shards()));
  // A step larger than a rank's share of the set (compared without multiplying, which could
  // overflow) would make every epoch one short step, its learning rate scaled for a full one.
  const int64_t share = sampler->num_samples();
  DPT_CHECK(o.batch_size() <= share / accum_steps, ConfigError, "rank ", comm->rank(), ": -b ", o.batch_size(),
            accum_steps > 1 ? str(" x --accum-steps ", accum_steps) : std::string(), " is more than the ", share,
            " training images each of the ", comm->size(), " process(es) takes per epoch (", data.train->size(),
            " in all): every epoch would be one short step, its learning rate scaled for a full one; use -b",
            accum_steps > 1 ? " x --accum-steps" : "", " of at most ", share);
  schedule = std::make_unique<optim::LrSchedule>(
      optim::LrScheduleOptions(o.schedule()).global_batch(global_batch()).epochs(o.epochs()), steps_per_epoch());
  mixing = std::make_unique<BatchMixing>(o.loss().mixing(), data.train->num_classes());
  if (o.model_ema()) {
    ema = std::make_unique<optim::ModelEma>(model, optim::ema_decay(*o.model_ema(), global_batch(), o.epochs()));
  }
  // Ranks apart (an asynchronous parameter server's workers) never wait for each other: a silent
  // one holds no other back, and the servers notice a worker that left themselves.
  const auto& watch = o.parallel().heartbeat();
  if (watch && ranks().together()) {
    heartbeat = std::make_unique<dist::Heartbeat>(comm->store(), comm->rank(), comm->size(), heartbeat_options());
  }
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
  if (std::string note = style->load_comm_hook_state(cp.comm_hook); !note.empty()) start_notes.push_back(note);
  if (cp.bucket_cap_mb > 0) style->resume_bucket_cap(cp.bucket_cap_mb);
  if (ema && !cp.model_ema.is_empty()) {
    ema->load_state_dict(cp.model_ema);
  } else if (ema) {
    start_notes.push_back(str("checkpoint ", file.string(), " has no model EMA: the average starts from its weights"));
  }
  if (cp.rng_state.numel() > 0) {
    at::Generator generator = at::detail::getDefaultCPUGenerator();  // shares the default's state
    generator.set_state(cp.rng_state);
  }
}

void Trainer::State::adapt_to_world(const TrainingCheckpoint& cp) {
  const int64_t per_micro_step = options.batch_size() * comm->size();
  const bool accumulates = style_traits(options.parallel().mode()).accepts(StyleFlag::AccumSteps);
  const bool kept = accumulates && cp.global_batch % per_micro_step == 0;
  if (kept) accum_steps = cp.global_batch / per_micro_step;
  // The rate follows the global batch from the batch the base rate was set for: --lr's reference
  // batch, or without linear scaling the checkpoint's record of it (the first run's global batch),
  // so that a job that shrinks and grows back returns to its rate.
  optim::LrScheduleOptions lr(options.schedule());
  if (!lr.reference_batch()) lr.reference_batch(cp.lr_reference_batch > 0 ? cp.lr_reference_batch : cp.global_batch);
  const double before = optim::scaled_lr(optim::LrScheduleOptions(lr).global_batch(cp.global_batch));
  schedule =
      std::make_unique<optim::LrSchedule>(lr.global_batch(global_batch()).epochs(options.epochs()), steps_per_epoch());
  // The position in the new steps, for the schedule; the data continues from samples_in_epoch.
  step_in_epoch = samples_in_epoch / global_batch();
  std::string how = kept ? str("the global batch stays ", cp.global_batch, " through ", accum_steps,
                               " accumulation step(s) per optimizer step; the learning rate is unchanged")
                         : str("a global batch of ", cp.global_batch, " does not split into ", comm->size(),
                               " process(es) x ", options.batch_size(),
                               accumulates ? "" : " (no accumulation in this mode)",
                               ", so it becomes ", global_batch(), " and the learning rate is rescaled by ",
                               global_batch(), "/", cp.global_batch, ": ", before, " -> ", schedule->peak_lr());
  // (A checkpoint written after an epoch's short last step, before the count stopped at the
  // epoch's end, may hold more samples than the epoch has: no rest either.)
  const bool mid_epoch = samples_in_epoch > 0 && samples_in_epoch < sampler->epoch_length();
  start_notes.push_back(str("world size ", cp.world_size, " -> ", comm->size(), ": ", how,
                            mid_epoch ? str("; the rest of epoch ", epoch, " (from sample ", samples_in_epoch,
                                            ") is re-sharded over ", comm->size(), " process(es)")
                                      : ""));
}

void Trainer::State::expect_round_report(int resumed_from_world) {
  const Environment env = Environment::current();
  const auto cause = env.get(kRoundEndCauseVariable);
  if (!cause || comm->world().restart_count == 0) return;
  MembershipReport report;
  report.round = comm->world().restart_count;
  report.cause = *cause;
  report.world_size_before = resumed_from_world;
  report.world_size = comm->size();
  // metrics.jsonl holds the round before's steps: this round has written none yet.
  if (leader() && !options.checkpoint().output_dir().empty()) {
    report.last_logged_step = last_logged_step(options.checkpoint().output_dir());
  }
  round_change = report;
  if (const auto ns = env.get_int(kRoundEndTimeVariable)) {
    round_before_ended = Clock::time_point(std::chrono::duration_cast<Clock::duration>(std::chrono::nanoseconds(*ns)));
  }
}

void Trainer::State::open_logs() {
  if (!options.timeline().empty()) {
    timeline = std::make_unique<Timeline>(timeline_path(options.timeline(), file_rank()), file_rank());
  }
  if (!options.sample_log().empty()) sample_log = std::make_unique<SampleLog>(options.sample_log(), file_rank());
  checkpoints = std::make_unique<RunCheckpoints>(
      options.checkpoint(), CheckpointWriterOptions().background(options.checkpoint().in_background()), options.log(),
      timeline.get());
  if (options.stragglers().threshold() > 0 && comm->size() > 1) {
    stragglers = std::make_unique<StragglerWatch>(options.stragglers(), comm->rank(), comm->size(), timeline.get());
  }
  if (leader()) open_leader_logs();
}

void Trainer::State::open_leader_logs() {
  const std::string& output_dir = options.checkpoint().output_dir();
  if (!output_dir.empty()) {
    std::error_code error;
    fs::create_directories(output_dir, error);
    DPT_CHECK(!error, ConfigError, "cannot create the --output folder ", output_dir, ": ", error.message(),
              "; choose a folder this process can write");
  }
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

void Trainer::State::print_banner() const {
  if (!leader() || options.log() == nullptr) return;
  auto& out = *options.log();
  out << "dptrain train: " << options.arch() << ", " << comm->size() << " process(es), batch " << options.batch_size();
  // One process driving replicas (--mode dp): -b is the batch of a step, as nn.DataParallel's.
  if (style_traits(options.parallel().mode()).one_process()) {
    out << " per step (split over the replicas)";
  } else {
    out << " per process";
    if (accum_steps > 1) out << " x " << accum_steps << " accumulation steps";
    out << " (" << global_batch() << " global)";
  }
  out << ", lr " << schedule->peak_lr();
  const optim::LrScheduleOptions& lr = options.schedule();
  if (lr.reference_batch()) {
    out << " (" << lr.base_lr() << " x " << global_batch() << "/" << *lr.reference_batch() << ")";
  }
  out << ", " << to_string(options.optimizer().kind());
  if (sharded) {
    int64_t elements = 0;
    for (const auto& group : sharded->param_groups()) {
      for (const auto& p : group.params()) elements += p.numel();
    }
    out << " (" << sharded->describe() << ", rank 0 that of " << sharded->local_numel() << " of " << elements
        << " weights)";
  }
  out << ", " << (lr.warmup_method() == optim::WarmupMethod::Constant ? "constant " : "") << "warm-up "
      << lr.warmup_epochs() << " epoch(s), " << to_string(lr.decay()) << " schedule"
      << (lr.per_epoch() ? " stepped per epoch" : "") << ", amp "
      << (options.amp() ? precision() : "off") << ", device "
      << device.str() << ", " << style->describe();
  if (comm->size() > 1) out << " over " << comm->transport();
  out << "\n"
      << "data: " << data.kind << ", " << data.train->size() << " training and " << data.val->size()
      << " validation images, " << data.train->num_classes() << " classes, " << steps_per_epoch()
      << " steps per epoch"
      << (data.train_index_bytes ? fmt::format("; the training shards' index holds {:.1f} MB",
                                               static_cast<double>(data.train_index_bytes) / 1e6)
                                 : "")
      << (data.shard_cache ? fmt::format("; fetched {} shard(s) at once into {}, at most {:.3g} GiB",
                                         data.shard_cache->fetch_streams(), data.shard_cache->folder(),
                                         static_cast<double>(data.shard_cache->max_bytes()) / (1 << 30))
                           : "")
      << (data.s3 ? fmt::format("; S3 at {} (region {}), {}", data.s3->endpoint_url(), data.s3->region,
                                data.s3->credentials_source.empty()
                                    ? std::string("unsigned: no credentials found")
                                    : "signed with the key from " + data.s3->credentials_source)
                  : "")
      << std::endl;
  out << fmt::format("compute: {:.3g} G multiply-adds per image forward at {} px; ", train_flop_per_image / 6e9,
                     data.image_size)
      << (run_peak_flop_per_s ? fmt::format("MFU against {:.0f} GFLOP/s ({} peak, bench-peak)",
                                            *run_peak_flop_per_s / 1e9, precision())
                              : "for MFU, measure this machine's peak once with dptrain bench-peak")
      << std::endl;
  print_hints(out);
  for (const auto& note : start_notes) out << note << std::endl;
}

// Once per run, what would make this machine train faster, where it pays.
void Trainer::State::print_hints(std::ostream& out) const {
  if (device.is_cpu()) {
    if (const auto why = compat::onednn_cannot_plan_here()) out << "warning: " << *why << std::endl;
    const BlasLibrary blas = blas_in_use();
    if (blas.is_reference()) out << "warning: " << blas.advice() << std::endl;
    // DataParallel's replicas are threads of this process, beside LibTorch's OpenMP threads.
    if (style->replica_threads() > 1 && !openmp_threads_sleep()) {
      out << "hint: --mode dp runs its replicas as threads beside LibTorch's OpenMP threads, which wait by spinning "
          << "on the cores the replicas need: start dptrain with OMP_WAIT_POLICY=passive (1.2 to 1.8 times the "
          << "images/s in bench/data_parallel)" << std::endl;
    }
    const CpuFeatures cpu = cpu_features();
    if (!options.amp() && cpu.has_bf16_units()) {
      out << "hint: this CPU has bf16 matrix units (" << cpu.describe() << "): --amp --channels-last trains in "
          << "bf16 on them, at about twice fp32's images/s for convolutional networks (docs/benchmarks.md)"
          << std::endl;
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

}  // namespace dpt::train
