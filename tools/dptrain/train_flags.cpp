// `dptrain train`'s flags (train_flags.h).

#include "train_flags.h"

#include "comm_hook_flags.h"

#include "dptrain/common/environment.h"
#include "dptrain/common/error.h"
#include "dptrain/dist/init_method.h"
#include "dptrain/optim/optimizer.h"
#include "dptrain/train/style_traits.h"
#include "number_bounds.h"
#include "seconds_flag.h"

namespace dpt::cli {

namespace {

void add_schedule_flags(CLI::App& app, optim::LrScheduleOptions& lr) {
  app.add_option("--lr", lr.base_lr(), "base learning rate for a global batch of 256")
      ->check(above(0))
      ->capture_default_str();
  app.add_flag_callback("--no-lr-scaling", [&lr] { lr.reference_batch(std::nullopt); },
                        "use --lr as is, not lr x global batch / 256");
  app.add_option("--warmup-epochs,--lr-warmup-epochs", lr.warmup_epochs(), "warm-up length")
      ->check(at_least(0))
      ->capture_default_str();
  add_parsed_option(app, "--lr-warmup-method", lr.warmup_method(), optim::parse_warmup_method,
                    "linear (from the start rate to the peak) or constant (the start rate, then the peak)");
  app.add_option("--lr-warmup-decay", lr.warmup_decay(), "warm-up start rate as a fraction of the peak")
      ->check(within(0, 1));
  add_parsed_option(app, "--lr-schedule", lr.decay(), optim::parse_lr_decay,
                    "step, multistep, cosine, exponential or none");
  app.add_option_function<std::string>(
      "--lr-scheduler",
      [&lr](const std::string& name) {
        try {
          lr.decay(optim::parse_torchvision_lr_scheduler(name)).per_epoch(true);
        } catch (const ConfigError& e) {
          throw CLI::ValidationError("--lr-scheduler", e.what());
        }
      },
      "torchvision's names (steplr, cosineannealinglr, exponentiallr) and semantics: the rate changes once per "
      "epoch, the schedule counts epochs from the end of warm-up");
  app.add_option("--lr-step,--lr-step-size", lr.step_epochs(), "step schedule: epochs between decays")
      ->check(at_least(1))
      ->capture_default_str();
  app.add_option("--lr-gamma", lr.gamma(), "step, multistep and exponential: decay factor")
      ->check(at_least(0))
      ->capture_default_str();
  app.add_option("--lr-milestones", lr.milestones(), "multistep: decay epochs")
      ->delimiter(',')
      ->check(at_least(0));
  app.add_option("--lr-min", lr.min_lr(), "cosine: the final rate")->check(at_least(0))->capture_default_str();
}

void add_optimizer_flags(CLI::App& app, optim::OptimizerOptions& opt, OptionalFlags<optim::ModelEmaOptions>& ema) {
  add_parsed_option(app, "--opt", opt.kind(), optim::parse_optimizer_kind, "sgd, sgd_nesterov, rmsprop or adamw");
  app.add_option("--momentum", opt.momentum(), "SGD's and RMSprop's momentum")
      ->check(at_least(0))
      ->capture_default_str();
  app.add_option("--wd,--weight-decay", opt.weight_decay())->check(at_least(0))->capture_default_str();
  app.add_option("--norm-weight-decay", opt.norm_weight_decay(),
                 "weight decay of the normalisation layers' parameters (default: --wd)")
      ->check(at_least(0));
  app.add_option("--bias-weight-decay", opt.bias_weight_decay(), "weight decay of every bias (default: its layer's)")
      ->check(at_least(0));
  app.add_option("--clip-grad-norm", opt.clip_grad_norm(),
                 "scale the averaged gradients down to this total 2-norm when above it")
      ->check(above(0));
  ema.add_switch(app, "--model-ema",
                 "keep an exponential moving average of the weights, validated and checkpointed beside them");
  app.add_option("--model-ema-steps", ema.values().steps(), "optimizer steps between EMA updates")
      ->check(at_least(1))
      ->capture_default_str();
  app.add_option("--model-ema-decay", ema.values().decay(),
                 "EMA decay, adjusted as torchvision's for the global batch, update interval and epochs")
      ->check(within(0, 1))
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
      ->check(within(0, 30))
      ->capture_default_str();
  app.add_option("--augmix-severity", augment.values().severity(), "AugMix's severity")
      ->check(within(1, 10))
      ->capture_default_str();
  app.add_flag("--ra-sampler", flags.ra_sampler,
               "repeated augmentation: each training image --ra-reps times per epoch, each copy augmented on its own "
               "(torchvision's RASampler; an epoch then keeps floor(n / 256) * 256 samples)");
  app.add_option("--ra-reps", flags.ra_reps, "--ra-sampler: copies of each image")
      ->check(within(1, 64))
      ->capture_default_str();
  app.add_option("--random-erase", data.random_erase(), "probability of RandomErasing per training image")
      ->check(within(0, 1))
      ->capture_default_str();
}

void add_loss_flags(CLI::App& app, train::LossOptions& loss) {
  app.add_option("--label-smoothing", loss.label_smoothing(), "cross-entropy against smoothed targets")
      ->check(within(0, 1))
      ->capture_default_str();
  app.add_option("--mixup-alpha", loss.mixing().mixup_alpha(), "mixup with Beta(alpha, alpha) weights (0: off)")
      ->check(at_least(0))
      ->capture_default_str();
  app.add_option("--cutmix-alpha", loss.mixing().cutmix_alpha(), "cutmix with Beta(alpha, alpha) areas (0: off); "
                 "with --mixup-alpha, one of the two per batch")
      ->check(at_least(0))
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
                 "also write checkpoint.pt when M minutes have passed since the last one")
      ->check(above(0));
  app.add_flag("--checkpoint-async,!--no-checkpoint-async", checkpoint.in_background(),
               "write checkpoints on a background thread, training pausing only to copy the state to host memory "
               "(the default); --no-checkpoint-async: rank 0 writes them in the training thread");
  train::StragglerOptions& stragglers = flags.options.stragglers();
  app.add_option("--straggler-warn", stragglers.threshold(),
                 "name a rank whose busy time per step (the step without waiting for the others) stays this fraction "
                 "above the other ranks' median, with its slowest part (0: off)")
      ->check(at_least(0))
      ->capture_default_str();
  app.add_option("--straggler-seconds", stragglers.window_seconds(),
                 "about how long each comparison window lasts (its steps follow the step time); a rank is named "
                 "after 3 slow windows in a row")
      ->check(above(0))
      ->capture_default_str();
  app.add_option("--straggler-window", stragglers.window_steps(),
                 "a fixed number of steps per comparison window instead of --straggler-seconds")
      ->check(at_least(1));
  app.add_option("--timeline", flags.options.timeline(),
                 "write each rank's steps (data, forward, backward, each bucket's all-reduce, optimizer, "
                 "validation, checkpoints) as a Chrome/Perfetto trace: FILE.json becomes FILE.rank<N>.json");
  app.add_option("--sample-log", flags.options.sample_log(),
                 "write the dataset indices each step trained on each rank, a line per step (step, epoch, "
                 "indices): FILE.txt becomes FILE.rank<N>.txt, appended to by a resumed run");
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
          ->check(at_least(0));
  sync->excludes(async)->excludes(staleness);
  async->excludes(staleness);
}

// --heartbeat's value: 'auto' (the silence allowed follows the step time), 'off', or seconds.
std::optional<dist::HeartbeatOptions> heartbeat_option(const std::string& value) {
  if (value == "auto") return dist::HeartbeatOptions();
  if (value == "off") return std::nullopt;
  const dist::HeartbeatOptions defaults;
  const double least = 2 * std::chrono::duration<double>(defaults.confirm()).count();
  double seconds = 0;
  size_t used = 0;
  try {
    seconds = std::stod(value, &used);
  } catch (const std::exception&) {
    used = 0;
  }
  DPT_CHECK(used == value.size() && seconds >= least, ConfigError, "--heartbeat takes 'auto', 'off' or seconds of at "
            "least ", least, " (a suspect is confirmed over ", least / 2, " s, at most half the bound), got '", value, "'");
  return dist::HeartbeatOptions().silence(milliseconds(seconds, "--heartbeat"));
}

void add_parallel_flags(CLI::App& app, TrainFlags& flags) {
  train::ParallelOptions& parallel = flags.options.parallel();
  app.add_option_function<std::string>(
         "--heartbeat", [&parallel](const std::string& value) { parallel.heartbeat(heartbeat_option(value)); },
         "how long a rank may be silent (stopped, killed without its launcher noticing, its machine gone) before "
         "the rank watching it names it and exits, for the launcher to restart the group or the elastic "
         "rendezvous to re-form it: 'auto' (3 step times + 2 s), SECONDS, or 'off' (only --dist-timeout bounds "
         "the wait then)")
      ->default_str("auto");
  app.add_option_function<std::string>(
         "--on-failure",
         [&parallel](const std::string& value) {
           const Environment env = Environment::current();
           // Under a launcher that stops every rank when one dies, the others could never go on.
           DPT_CHECK(value != "continue" || !env.has("TORCHELASTIC_RUN_ID") || env.get(kKeepsSurvivorsVariable) == "1",
                     ConfigError, "--on-failure continue: this process's launcher stops every rank when one fails; "
                     "start the job with dptrain launch --on-failure continue");
           parallel.on_failure(value == "continue" ? OnFailure::Continue : OnFailure::Restart);
         },
         "when a rank is lost while the ranks train: 'restart' (the ranks exit, for the launcher to restart the "
         "group from the last checkpoint) or 'continue' (the others drop the step in flight and go on without it, "
         "in-process, from the last completed step; needs dptrain launch --on-failure continue)")
      ->check(CLI::IsMember({"restart", "continue"}))
      ->default_str("restart");
  add_parsed_option(app, "--mode", parallel.mode(), train::parse_parallel_mode,
                    "ddp: one process per replica (DistributedDataParallel); dp: one process driving the "
                    "--replicas/--gpus replicas, -b then being the batch per step split over them "
                    "(nn.DataParallel); hvd: Horovod's DistributedOptimizer with broadcast weights; ps: a parameter "
                    "server, the last --ps-servers processes holding the weights and running SGD, the others "
                    "workers pushing gradients and pulling weights");
  app.add_flag("--sync-bn", parallel.sync_bn(), "batch-norm statistics over all processes (SyncBatchNorm)");
  app.add_option("--zero", parallel.zero_stage(),
                 "--mode ddp: 1 shards the optimizer state over the processes (ZeRO-1, PyTorch's "
                 "ZeroRedundancyOptimizer): each keeps and steps its shard's, then the updated weights are "
                 "gathered; 2 also the averaged gradients (ZeRO-2: each bucket reduce-scattered as backward "
                 "fills it); checkpoints hold the whole state, resumable with or without it")
      ->capture_default_str();
  ReducerOptions& reducer = parallel.reducer();
  app.add_option_function<double>(
         "--bucket-cap-mb",
         [&parallel](double mb) {
           parallel.reducer().bucket_cap_mb(mb);
           parallel.tune_buckets(false);
         },
         "--mode ddp and ps: gradient bucket size in MiB, each bucket reduced as soon as backward fills it "
         "(default: ddp chooses from 1, 4, 10, 25 and 50 by measuring its first steps, and says which; ps 25)")
      ->check(above(0));
  app.add_option("--first-bucket-cap-mb", reducer.first_bucket_cap_mb(),
                 "--mode ddp and ps: the first bucket's size (small, so that communication starts early)")
      ->check(above(0))
      ->capture_default_str();
  app.add_option("--last-bucket-cap-mb", reducer.last_bucket_cap_mb(),
                 "--mode ddp and ps: the last bucket's size (small, so that little is left once backward ends)")
      ->check(above(0))
      ->capture_default_str();
  app.add_flag("--find-unused-parameters", reducer.find_unused_parameters(),
               "--mode ddp and ps: parameters without a gradient in a step count as ready (one more small "
               "all-reduce per step) instead of failing the step");
  add_comm_hook_flags(app, parallel.comm_hook());
  add_parameter_server_flags(app, parallel.ps());
  app.add_option("--replicas", parallel.replicas(), "--mode dp: this many CPU replicas")->check(at_least(1));
  // A device index of -1 would be LibTorch's "the current device", not an error.
  app.add_option("--gpus", parallel.gpus(), "--mode dp: CUDA devices of the replicas, e.g. 0,1 (the first holds the model)")
      ->delimiter(',')
      ->check(at_least(0));
  app.add_flag("--multiprocessing-distributed", flags.multiprocessing_distributed,
               "start one worker per visible GPU (or --nprocs) and supervise them, as mp.spawn; "
               "--world-size is then the number of nodes and --rank this node's index (world = nodes x "
               "workers, rank = node rank x workers + local rank), --dist-url tcp://HOST:PORT the "
               "rendezvous (default: a free local port)");
  app.add_option("--nprocs", flags.nprocs, "--multiprocessing-distributed: workers on this node (default: one per GPU)")
      ->check(at_least(1));
}

// Flags that belong to some modes, given with another: a mistake, not something to ignore. The
// style says which it takes (the flags its options show, such as --zero or --amp, are asked by
// check_style_options as the library's options are checked).
void check_mode_flags(const CLI::App& app, const train::TrainOptions& options) {
  const std::pair<train::StyleFlag, std::vector<const char*>> given[] = {
      {train::StyleFlag::ParameterServer, {"--ps-servers", "--ps-sync", "--ps-async", "--ps-staleness"}},
      {train::StyleFlag::Buckets,
       {"--bucket-cap-mb", "--first-bucket-cap-mb", "--last-bucket-cap-mb", "--find-unused-parameters"}},
  };
  check_comm_hook_flags(app, options.parallel().comm_hook());
  const train::StyleTraits& style = train::style_traits(options.parallel().mode());
  for (const auto& [flag, names] : given) {
    size_t count = 0;
    for (const char* name : names) count += app.count(name);
    DPT_CHECK(count == 0 || style.accepts(flag), ConfigError, style.refusal(flag));
  }
}

}  // namespace

void add_train_flags(CLI::App& app, TrainFlags& flags, SwitchedFlags& switched) {
  train::TrainOptions& o = flags.options;
  add_run_flags(app, o);
  app.add_option("--epochs", o.epochs())->capture_default_str();
  app.add_option("--start-epoch", o.start_epoch(), "first epoch when not resuming")->capture_default_str();
  app.add_option("--accum-steps", o.accum_steps(),
                 "micro-batches of -b per optimizer step, gradients reduced once per step (global batch: "
                 "-b x processes x this)")
      ->capture_default_str();
  app.add_option("--max-steps", o.max_steps(), "stop after N optimizer steps in all, mid-epoch if need be");
  add_schedule_flags(app, o.schedule());
  add_optimizer_flags(app, o.optimizer(), switched.model_ema);
  add_augmentation_flags(app, o.data(), switched);
  add_loss_flags(app, o.loss());
  add_checkpoint_flags(app, flags);
  add_parallel_flags(app, flags);
  app.add_option("--peak-file", flags.peak_file,
                 "this machine's peak FLOP/s from dptrain bench-peak, for MFU in the logs (default: where "
                 "bench-peak writes)");
}

void finish_train_flags(const CLI::App& app, TrainFlags& flags, SwitchedFlags& switched) {
  check_mode_flags(app, flags.options);
  switched.finish(flags.options);
}

launch::SpawnOptions spawn_options(const dist::InitOptions& dist) {
  auto options = launch::SpawnOptions().nnodes(dist.world().world_size.value_or(1)).node_rank(dist.world().rank.value_or(0));
  // The library's parse, as init_process_group reads --dist-url (IPv6, the port's range and digits).
  const dist::InitMethod method = dist::parse_init_method(dist.init_method());
  if (method.kind == dist::InitMethod::Kind::Tcp) {
    options.master_addr(method.host).master_port(method.port);
  } else {
    DPT_CHECK(method.kind == dist::InitMethod::Kind::Env, ConfigError, "--multiprocessing-distributed rendezvous over ",
              "tcp://HOST:PORT (or a free local port when --dist-url is not given), not '", dist.init_method(), "'");
  }
  DPT_CHECK(options.nnodes() == 1 || options.master_port(), ConfigError, "--world-size ", options.nnodes(),
            " nodes with --multiprocessing-distributed need --dist-url tcp://HOST:PORT of node 0");
  return options;
}

}  // namespace dpt::cli
