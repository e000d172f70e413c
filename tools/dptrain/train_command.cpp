// `dptrain train`: the ImageNet-style trainer, flags as in pytorch/examples' imagenet/main.py.
// Rank 0 prints a banner, progress lines and, at the end, one JSON line with the results.
//
//   dptrain launch --standalone --nproc-per-node 2 -- dptrain train --dummy -a resnet20 -b 64 --epochs 3
//   dptrain train /data/imagenet -a resnet50 -b 64 --warmup-epochs 5 --output run1 --amp
//   dptrain train --multiprocessing-distributed --dummy -a resnet20      # one worker per GPU, mp.spawn style
//   dptrain train --mode dp --replicas 2 --dummy -a resnet20 -b 128      # one process, two replicas
//   dptrain launch --standalone --nproc-per-node 2 -- dptrain train --mode hvd --dummy -a resnet20
//   dptrain launch --standalone --nproc-per-node 3 -- dptrain train --mode ps --ps-async --dummy -a resnet20

#include <iostream>

#include <nlohmann/json.hpp>

#include "command.h"
#include "compute_peak.h"
#include "dptrain/common/environment.h"
#include "dptrain/common/error.h"
#include "dptrain/common/exit_codes.h"
#include "dptrain/launch/spawn.h"
#include "dptrain/launch/visible_gpus.h"
#include "dptrain/train/ps_server_role.h"
#include "dptrain/train/trainer.h"
#include "run_flags.h"
#include "slurm_requeue.h"

namespace dpt::cli {

namespace {

// What `dptrain train` adds to TrainOptions: what to do, and how to start the processes.
struct TrainFlags {
  train::TrainOptions options = command_line_options();
  bool evaluate = false;
  bool requeue = false;
  std::string slurm_job_id;  // with --requeue: this job's, from SLURM_JOB_ID
  bool multiprocessing_distributed = false;
  std::optional<int> nprocs;
  std::string peak_file;  // bench-peak's; empty: where bench-peak writes by default
};

// Groups of flags behind a switch (run_flags.h's OptionalFlags), bound to a TrainFlags' options,
// which must stay where they are until finish().
struct SwitchedFlags {
  explicit SwitchedFlags(train::TrainOptions& options)
      : model_ema(options.model_ema()), auto_augment(options.data().auto_augment()) {}

  OptionalFlags<train::ModelEmaOptions> model_ema;
  OptionalFlags<data::AutoAugmentOptions> auto_augment;
  bool ra_sampler = false;
  int64_t ra_reps = 3;

  void finish(train::TrainOptions& options) {
    model_ema.finish();
    auto_augment.finish();
    if (ra_sampler) options.data().repeated_augmentations(ra_reps);
  }
};

// A --mode ps server's part of the job: serve until every worker stopped, then say how it went.
int serve_process(const train::TrainOptions& options) {
  const ps::ServerReport report = train::serve_parameters(options);
  std::cerr << "parameter server rank " << report.rank << ": " << report.updates << " update(s) applied, workers at most " << report.max_lead
            << " step(s) apart"
            << (report.workers_lost.empty() ? "" : str(", ", report.workers_lost.size(), " worker(s) lost"))
            << std::endl;
  return 0;
}

// One process's part of the job: training, evaluation, or under --mode ps perhaps serving.
int train_process(const TrainFlags& flags) {
  const train::TrainOptions& options = flags.options;
  if (train::serves_parameters(options)) return serve_process(options);
  const bool evaluate = flags.evaluate;
  train::Trainer trainer(options);
  nlohmann::json summary;
  int exit_code = 0;
  if (evaluate) {
    summary = {{"val", metrics_json(trainer.evaluate())}};
  } else {
    const auto result = trainer.train();
    summary = {{"epochs", result.epochs_done},
               {"global_step", result.global_step},
               {"best_acc1", result.best_acc1},
               {"val", metrics_json(result.last_val)}};
    if (result.last_val_ema) summary["val_ema"] = metrics_json(*result.last_val_ema);
    if (result.stopped_on_request) {
      summary["stopped_on_request"] = true;
      exit_code = kExitStoppedOnRequest;
      // Every rank has passed the barrier after rank 0's checkpoint: safe to end the job now.
      if (flags.requeue && trainer.rank() == 0) {
        summary["requeued"] = requeue_slurm_job(flags.slurm_job_id, std::chrono::seconds(60), std::cout);
      }
    }
  }
  if (trainer.rank() == 0) std::cout << summary.dump() << std::endl;
  return exit_code;
}

// "tcp://HOST:PORT" -> spawn's rendezvous; env:// (the default) -> a free port on this host.
launch::SpawnOptions spawn_options(const dist::InitOptions& dist) {
  auto options = launch::SpawnOptions().nnodes(dist.world().world_size.value_or(1)).node_rank(dist.world().rank.value_or(0));
  const std::string tcp = "tcp://";
  if (dist.init_method().rfind(tcp, 0) == 0) {
    const std::string address = dist.init_method().substr(tcp.size());
    const size_t colon = address.rfind(':');
    DPT_CHECK(colon != std::string::npos && colon > 0, ConfigError, "--dist-url '", dist.init_method(),
              "' has no port; use tcp://HOST:PORT");
    options.master_addr(address.substr(0, colon));
    try {
      options.master_port(std::stoi(address.substr(colon + 1)));
    } catch (const std::exception&) {
      DPT_CHECK(false, ConfigError, "--dist-url '", dist.init_method(), "': '", address.substr(colon + 1), "' is not a port");
    }
  } else {
    DPT_CHECK(dist.init_method() == "env://", ConfigError, "--multiprocessing-distributed rendezvous over tcp://HOST:PORT ",
              "(or a free local port when --dist-url is not given), not '", dist.init_method(), "'");
  }
  DPT_CHECK(options.nnodes() == 1 || options.master_port(), ConfigError, "--world-size ", options.nnodes(),
            " nodes with --multiprocessing-distributed need --dist-url tcp://HOST:PORT of node 0");
  return options;
}

// imagenet/main.py's --multiprocessing-distributed: --world-size counts nodes and --rank is this
// node's index; each worker's rank and the job's size come from spawn's environment.
int run_train(TrainFlags f) {
  if (f.requeue) {
    const auto job = Environment::current().get("SLURM_JOB_ID");
    DPT_CHECK(job && !job->empty(), ConfigError, "--requeue puts a Slurm job back in the queue, and SLURM_JOB_ID is "
              "not set: run under sbatch --requeue, or leave --requeue out");
    f.slurm_job_id = *job;
  }
  if (!f.multiprocessing_distributed) return train_process(f);
  DPT_CHECK(f.options.parallel().mode() != train::ParallelMode::Dp, ConfigError,
            "--mode dp is one process; it cannot be combined with --multiprocessing-distributed");
  DPT_CHECK(f.nprocs || !launch::visible_gpus(Environment::current()).empty(), ConfigError,
            "--multiprocessing-distributed starts one worker per visible GPU and none is visible; give the "
            "number of workers with --nprocs N");
  const auto options = spawn_options(f.options.parallel().dist());
  TrainFlags worker = f;
  // The workers find MASTER_ADDR/MASTER_PORT (those of --dist-url) in their environment, and
  // their rank and the job's size in spawn's.
  worker.options.parallel().dist().world({}).init_method("env://");
  return launch::spawn([&](int) { return train_process(worker); }, f.nprocs, options);
}

void add_schedule_flags(CLI::App& app, train::LrScheduleOptions& lr) {
  app.add_option("--lr", lr.base_lr(), "base learning rate for a global batch of 256")->capture_default_str();
  app.add_flag_callback("--no-lr-scaling", [&lr] { lr.reference_batch(std::nullopt); },
                        "use --lr as is, not lr x global batch / 256");
  app.add_option("--warmup-epochs,--lr-warmup-epochs", lr.warmup_epochs(), "warm-up length")->capture_default_str();
  add_parsed_option(app, "--lr-warmup-method", lr.warmup_method(), train::parse_warmup_method,
                    "linear (from the start rate to the peak) or constant (the start rate, then the peak)");
  app.add_option("--lr-warmup-decay", lr.warmup_decay(), "warm-up start rate as a fraction of the peak")
      ->check(CLI::Range(0.0, 1.0));
  add_parsed_option(app, "--lr-schedule", lr.decay(), train::parse_lr_decay,
                    "step, multistep, cosine, exponential or none");
  app.add_option_function<std::string>(
      "--lr-scheduler",
      [&lr](const std::string& name) {
        try {
          lr.decay(train::parse_torchvision_lr_scheduler(name)).per_epoch(true);
        } catch (const ConfigError& e) {
          throw CLI::ValidationError("--lr-scheduler", e.what());
        }
      },
      "torchvision's names (steplr, cosineannealinglr, exponentiallr) and semantics: the rate changes once per "
      "epoch, the schedule counts epochs from the end of warm-up");
  app.add_option("--lr-step,--lr-step-size", lr.step_epochs(), "step schedule: epochs between decays")
      ->capture_default_str();
  app.add_option("--lr-gamma", lr.gamma(), "step, multistep and exponential: decay factor")->capture_default_str();
  app.add_option("--lr-milestones", lr.milestones(), "multistep: decay epochs")->delimiter(',');
  app.add_option("--lr-min", lr.min_lr(), "cosine: the final rate")->capture_default_str();
}

void add_optimizer_flags(CLI::App& app, train::OptimizerOptions& opt, OptionalFlags<train::ModelEmaOptions>& ema) {
  add_parsed_option(app, "--opt", opt.kind(), train::parse_optimizer_kind, "sgd, sgd_nesterov, rmsprop or adamw");
  app.add_option("--momentum", opt.momentum(), "SGD's and RMSprop's momentum")->capture_default_str();
  app.add_option("--wd,--weight-decay", opt.weight_decay())->capture_default_str();
  app.add_option("--norm-weight-decay", opt.norm_weight_decay(),
                 "weight decay of the normalisation layers' parameters (default: --wd)");
  app.add_option("--bias-weight-decay", opt.bias_weight_decay(), "weight decay of every bias (default: its layer's)");
  app.add_option("--clip-grad-norm", opt.clip_grad_norm(),
                 "scale the averaged gradients down to this total 2-norm when above it");
  ema.add_switch(app, "--model-ema",
                 "keep an exponential moving average of the weights, validated and checkpointed beside them");
  app.add_option("--model-ema-steps", ema.values().steps(), "optimizer steps between EMA updates")
      ->capture_default_str();
  app.add_option("--model-ema-decay", ema.values().decay(),
                 "EMA decay, adjusted as torchvision's for the global batch, update interval and epochs")
      ->capture_default_str();
}

void add_augmentation_flags(CLI::App& app, train::DataOptions& data, SwitchedFlags& flags) {
  auto& augment = flags.auto_augment;
  add_parsed_option(app, "--auto-augment", augment.values().policy(), data::parse_auto_augment_policy,
                    "augmentation policy on each training crop: imagenet, cifar10 or svhn (AutoAugment), ra "
                    "(RandAugment), ta_wide (TrivialAugmentWide) or augmix")
      ->each([&augment](const std::string&) { augment.enable(); })
      ->default_str("");
  app.add_option("--ra-magnitude", augment.values().magnitude(), "RandAugment's magnitude bin (of 31)")
      ->check(CLI::Range(0, 30))
      ->capture_default_str();
  app.add_option("--augmix-severity", augment.values().severity(), "AugMix's severity")
      ->check(CLI::Range(1, 10))
      ->capture_default_str();
  app.add_flag("--ra-sampler", flags.ra_sampler,
               "repeated augmentation: each training image --ra-reps times per epoch, each copy augmented on its own "
               "(torchvision's RASampler; an epoch then keeps floor(n / 256) * 256 samples)");
  app.add_option("--ra-reps", flags.ra_reps, "--ra-sampler: copies of each image")
      ->check(CLI::Range(1, 64))
      ->capture_default_str();
  app.add_option("--random-erase", data.random_erase(), "probability of RandomErasing per training image")
      ->check(CLI::Range(0.0, 1.0))
      ->capture_default_str();
}

void add_loss_flags(CLI::App& app, train::LossOptions& loss) {
  app.add_option("--label-smoothing", loss.label_smoothing(), "cross-entropy against smoothed targets")
      ->check(CLI::Range(0.0, 1.0))
      ->capture_default_str();
  app.add_option("--mixup-alpha", loss.mixing().mixup_alpha(), "mixup with Beta(alpha, alpha) weights (0: off)")
      ->check(CLI::NonNegativeNumber)
      ->capture_default_str();
  app.add_option("--cutmix-alpha", loss.mixing().cutmix_alpha(), "cutmix with Beta(alpha, alpha) areas (0: off); "
                 "with --mixup-alpha, one of the two per batch")
      ->check(CLI::NonNegativeNumber)
      ->capture_default_str();
}

void add_checkpoint_flags(CLI::App& app, TrainFlags& flags) {
  train::CheckpointOptions& checkpoint = flags.options.checkpoint();
  app.add_option("--resume", checkpoint.resume(),
                 "checkpoint to continue from exactly, or 'auto': the newest readable one in --output, or a "
                 "fresh start when there is none yet (one command line for the first start and every restart)");
  app.add_flag("-e,--evaluate", flags.evaluate, "evaluate the model (from --resume or --pretrained) and stop");
  app.add_flag("--requeue", flags.requeue,
               "in a Slurm job submitted with --requeue: after stopping on SIGTERM/SIGUSR1 (e.g. --signal=USR1@90) "
               "and writing the checkpoint, rank 0 runs scontrol requeue; the requeued job continues with "
               "--resume auto");
  app.add_option("--pretrained", checkpoint.pretrained(), "initial weights: a checkpoint or a Python dict(state_dict)");
  app.add_option("--output", checkpoint.output_dir(), "folder for checkpoints (rank 0 writes)");
  app.add_option("--keep-checkpoints", checkpoint.keep(), "epoch checkpoints to keep")->capture_default_str();
  app.add_option("--checkpoint-every", checkpoint.every_steps(), "also write checkpoint.pt every N optimizer steps");
  app.add_option("--checkpoint-minutes", checkpoint.every_minutes(),
                 "also write checkpoint.pt when M minutes have passed since the last one");
  app.add_flag("--checkpoint-async,!--no-checkpoint-async", checkpoint.in_background(),
               "write checkpoints on a background thread, training pausing only to copy the state to host memory "
               "(the default); --no-checkpoint-async: rank 0 writes them in the training thread");
  train::StragglerOptions& stragglers = flags.options.stragglers();
  app.add_option("--straggler-warn", stragglers.threshold(),
                 "name a rank whose busy time per step (the step without waiting for the others) stays this fraction "
                 "above the other ranks' median, with its slowest part (0: off)")
      ->capture_default_str();
  app.add_option("--straggler-seconds", stragglers.window_seconds(),
                 "about how long each comparison window lasts (its steps follow the step time); a rank is named "
                 "after 3 slow windows in a row")
      ->capture_default_str();
  app.add_option("--straggler-window", stragglers.window_steps(),
                 "a fixed number of steps per comparison window instead of --straggler-seconds");
  app.add_option("--timeline", flags.options.timeline(),
                 "write each rank's steps (data, forward, backward, each bucket's all-reduce, optimizer, "
                 "validation, checkpoints) as a Chrome/Perfetto trace: FILE.json becomes FILE.rank<N>.json");
}

void add_parameter_server_flags(CLI::App& app, ps::PsOptions& ps) {
  app.add_option("--ps-servers", ps.servers(), "--mode ps: processes that serve (the job's last ranks); the rest are workers")
      ->capture_default_str();
  auto* sync = app.add_flag_callback(
      "--ps-sync", [&ps] { ps.consistency(ps::Consistency::Sync); },
      "--mode ps: average every worker's gradients, then step (DDP's mathematics; the default)");
  auto* async = app.add_flag_callback(
      "--ps-async", [&ps] { ps.consistency(ps::Consistency::Async); },
      "--mode ps: apply each worker's gradients as they arrive, scaled by 1/workers; workers never wait for each "
      "other");
  auto* staleness =
      app.add_option_function<int>(
             "--ps-staleness",
             [&ps](int k) { ps.staleness(k).consistency(k == 0 ? ps::Consistency::Sync : ps::Consistency::Bounded); },
             "--mode ps: as --ps-async, but no worker runs more than K steps ahead of the slowest (0: --ps-sync)")
          ->check(CLI::NonNegativeNumber);
  sync->excludes(async)->excludes(staleness);
  async->excludes(staleness);
}

void add_parallel_flags(CLI::App& app, TrainFlags& flags) {
  train::ParallelOptions& parallel = flags.options.parallel();
  add_parsed_option(app, "--mode", parallel.mode(), train::parse_parallel_mode,
                    "ddp: one process per replica (DistributedDataParallel); dp: one process driving the "
                    "--replicas/--gpus replicas, -b then being the batch per step split over them "
                    "(nn.DataParallel); hvd: Horovod's DistributedOptimizer with broadcast weights; ps: a parameter "
                    "server, the last --ps-servers processes holding the weights and running SGD, the others "
                    "workers pushing gradients and pulling weights");
  app.add_flag("--sync-bn", parallel.sync_bn(), "batch-norm statistics over all processes (SyncBatchNorm)");
  ReducerOptions& reducer = parallel.reducer();
  app.add_option("--bucket-cap-mb", reducer.bucket_cap_mb(),
                 "--mode ddp and ps: gradient bucket size in MiB, each bucket reduced as soon as backward fills it")
      ->check(CLI::PositiveNumber)
      ->capture_default_str();
  app.add_option("--first-bucket-cap-mb", reducer.first_bucket_cap_mb(),
                 "--mode ddp and ps: the first bucket's size (small, so that communication starts early)")
      ->check(CLI::PositiveNumber)
      ->capture_default_str();
  app.add_option("--last-bucket-cap-mb", reducer.last_bucket_cap_mb(),
                 "--mode ddp and ps: the last bucket's size (small, so that little is left once backward ends)")
      ->check(CLI::PositiveNumber)
      ->capture_default_str();
  app.add_flag("--find-unused-parameters", reducer.find_unused_parameters(),
               "--mode ddp and ps: parameters without a gradient in a step count as ready (one more small "
               "all-reduce per step) instead of failing the step");
  add_parameter_server_flags(app, parallel.ps());
  app.add_option("--replicas", parallel.replicas(), "--mode dp: this many CPU replicas");
  app.add_option("--gpus", parallel.gpus(), "--mode dp: CUDA devices of the replicas, e.g. 0,1 (the first holds the model)")
      ->delimiter(',');
  app.add_flag("--multiprocessing-distributed", flags.multiprocessing_distributed,
               "start one worker per visible GPU (or --nprocs) and supervise them, as mp.spawn; "
               "--world-size is then the number of nodes and --rank this node's index (world = nodes x "
               "workers, rank = node rank x workers + local rank), --dist-url tcp://HOST:PORT the "
               "rendezvous (default: a free local port)");
  app.add_option("--nprocs", flags.nprocs, "--multiprocessing-distributed: workers on this node (default: one per GPU)");
}

// Flags that belong to one mode, given with another: a mistake, not something to ignore.
void check_mode_flags(const CLI::App& app, const train::TrainOptions& options) {
  const bool ps_flags =
      app.count("--ps-servers") + app.count("--ps-sync") + app.count("--ps-async") + app.count("--ps-staleness") > 0;
  DPT_CHECK(!ps_flags || options.parallel().mode() == train::ParallelMode::Ps, ConfigError,
            "--ps-servers, --ps-sync, --ps-async and --ps-staleness belong to --mode ps");
  const bool bucket_flags = app.count("--bucket-cap-mb") + app.count("--first-bucket-cap-mb") +
                                app.count("--last-bucket-cap-mb") + app.count("--find-unused-parameters") > 0;
  const train::ParallelMode mode = options.parallel().mode();
  DPT_CHECK(!bucket_flags || mode == train::ParallelMode::Ddp || mode == train::ParallelMode::Ps, ConfigError,
            "--bucket-cap-mb, --first-bucket-cap-mb, --last-bucket-cap-mb and --find-unused-parameters belong to "
            "--mode ddp and ps (--mode hvd fuses tensors as Horovod does; --mode dp has no buckets)");
}

}  // namespace

Command add_train_command(CLI::App& root) {
  auto flags = std::make_shared<TrainFlags>();
  auto switched = std::make_shared<SwitchedFlags>(flags->options);
  auto* app = root.add_subcommand("train", "train an image classifier, data-parallel over the process group");
  train::TrainOptions& o = flags->options;
  add_run_flags(*app, o);
  app->add_option("--epochs", o.epochs())->capture_default_str();
  app->add_option("--start-epoch", o.start_epoch(), "first epoch when not resuming")->capture_default_str();
  app->add_option("--accum-steps", o.accum_steps(),
                  "micro-batches of -b per optimizer step, gradients reduced once per step (global batch: "
                  "-b x processes x this)")
      ->capture_default_str();
  app->add_option("--max-steps", o.max_steps(), "stop after N optimizer steps in all, mid-epoch if need be");
  add_schedule_flags(*app, o.schedule());
  add_optimizer_flags(*app, o.optimizer(), switched->model_ema);
  add_augmentation_flags(*app, o.data(), *switched);
  add_loss_flags(*app, o.loss());
  add_checkpoint_flags(*app, *flags);
  add_parallel_flags(*app, *flags);
  app->add_option("--peak-file", flags->peak_file,
                  "this machine's peak FLOP/s from dptrain bench-peak, for MFU in the logs (default: where "
                  "bench-peak writes)");
  return {app, [flags, switched, app](const std::vector<std::string>&) {
            check_mode_flags(*app, flags->options);
            switched->finish(flags->options);
            const std::filesystem::path peak_file = flags->peak_file.empty()
                                                        ? default_peak_file(Environment::current())
                                                        : std::filesystem::path(flags->peak_file);
            flags->options.peak_flop_per_s([peak_file](const std::string& device, const std::string& precision) {
              return measured_peak(peak_file, precision, device);
            });
            return run_train(*flags);
          }};
}

}  // namespace dpt::cli
