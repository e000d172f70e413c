// `dptrain train`: the ImageNet-style trainer, flags as in pytorch/examples' imagenet/main.py.
// Rank 0 prints a banner, progress lines and, at the end, one JSON line with the results.
//
//   dptrain launch --standalone --nproc-per-node 2 -- dptrain train --dummy -a resnet20 -b 64 --epochs 3
//   dptrain train /data/imagenet -a resnet50 -b 64 --warmup-epochs 5 --output run1 --amp
//   dptrain train --multiprocessing-distributed --dummy -a resnet20      # one worker per GPU, mp.spawn style
//   dptrain train --mode dp --replicas 2 --dummy -a resnet20 -b 128      # one process, two replicas
//   dptrain launch --standalone --nproc-per-node 2 -- dptrain train --mode hvd --dummy -a resnet20

#include <iostream>

#include <nlohmann/json.hpp>

#include "command.h"
#include "dptrain/common/environment.h"
#include "dptrain/common/error.h"
#include "dptrain/launch/spawn.h"
#include "dptrain/launch/visible_gpus.h"
#include "dptrain/train/trainer.h"
#include "run_flags.h"

namespace dpt::cli {

namespace {

struct TrainFlags {
  RunFlags run;
  int64_t epochs = 90;
  int64_t start_epoch = 0;
  double lr = 0.1;
  double momentum = 0.9;
  double weight_decay = 1e-4;
  std::string resume;
  bool evaluate = false;
  std::string pretrained;
  int64_t warmup_epochs = 0;
  std::string lr_schedule = "step";
  int64_t lr_step = 30;
  double lr_gamma = 0.1;
  std::vector<int64_t> lr_milestones;
  bool no_lr_scaling = false;
  std::string output;
  int64_t keep_checkpoints = 3;
  std::optional<int64_t> max_steps;
  bool sync_bn = false;
  std::string mode = "ddp";
  std::optional<int> replicas;
  std::vector<int> gpus;
  bool multiprocessing_distributed = false;
  std::optional<int> nprocs;
};

// One process's training, with `run` (rather than f.run) for its shared flags.
int train_process(const TrainFlags& f, const RunFlags& run) {
  auto options = run_options(run, run.arch.value_or("resnet18"))
                     .epochs(f.epochs)
                     .start_epoch(f.start_epoch)
                     .lr(f.lr)
                     .lr_scaling(!f.no_lr_scaling)
                     .momentum(f.momentum)
                     .weight_decay(f.weight_decay)
                     .warmup_epochs(f.warmup_epochs)
                     .lr_schedule(train::parse_lr_decay(f.lr_schedule))
                     .lr_step_epochs(f.lr_step)
                     .lr_gamma(f.lr_gamma)
                     .lr_milestones(f.lr_milestones)
                     .resume(f.resume)
                     .pretrained(f.pretrained)
                     .output_dir(f.output)
                     .keep_checkpoints(f.keep_checkpoints)
                     .max_steps(f.max_steps)
                     .sync_bn(f.sync_bn)
                     .mode(train::parse_parallel_mode(f.mode))
                     .replicas(f.replicas)
                     .gpus(f.gpus);
  train::Trainer trainer(options);
  nlohmann::json summary;
  if (f.evaluate) {
    summary = {{"val", metrics_json(trainer.evaluate())}};
  } else {
    const auto result = trainer.train();
    summary = {{"epochs", result.epochs_done},
               {"global_step", result.global_step},
               {"best_acc1", result.best_acc1},
               {"val", metrics_json(result.last_val)}};
  }
  if (trainer.rank() == 0) std::cout << summary.dump() << std::endl;
  return 0;
}

// "tcp://HOST:PORT" -> spawn's rendezvous; env:// (the default) -> a free port on this host.
launch::SpawnOptions spawn_options(const RunFlags& run) {
  auto options = launch::SpawnOptions().nnodes(run.world_size.value_or(1)).node_rank(run.rank.value_or(0));
  const std::string tcp = "tcp://";
  if (run.dist_url.rfind(tcp, 0) == 0) {
    const std::string address = run.dist_url.substr(tcp.size());
    const size_t colon = address.rfind(':');
    DPT_CHECK(colon != std::string::npos && colon > 0, ConfigError, "--dist-url '", run.dist_url,
              "' has no port; use tcp://HOST:PORT");
    options.master_addr(address.substr(0, colon));
    try {
      options.master_port(std::stoi(address.substr(colon + 1)));
    } catch (const std::exception&) {
      DPT_CHECK(false, ConfigError, "--dist-url '", run.dist_url, "': '", address.substr(colon + 1), "' is not a port");
    }
  } else {
    DPT_CHECK(run.dist_url == "env://", ConfigError, "--multiprocessing-distributed rendezvous over tcp://HOST:PORT ",
              "(or a free local port when --dist-url is not given), not '", run.dist_url, "'");
  }
  DPT_CHECK(options.nnodes() == 1 || options.master_port(), ConfigError, "--world-size ", options.nnodes(),
            " nodes with --multiprocessing-distributed need --dist-url tcp://HOST:PORT of node 0");
  return options;
}

// imagenet/main.py's --multiprocessing-distributed: --world-size counts nodes and --rank is this
// node's index; each worker's rank and the job's size come from spawn's environment.
int run_train(const TrainFlags& f) {
  if (!f.multiprocessing_distributed) return train_process(f, f.run);
  DPT_CHECK(f.mode != "dp", ConfigError, "--mode dp is one process; it cannot be combined with --multiprocessing-distributed");
  DPT_CHECK(f.nprocs || !launch::visible_gpus(Environment::current()).empty(), ConfigError,
            "--multiprocessing-distributed starts one worker per visible GPU and none is visible; give the "
            "number of workers with --nprocs N");
  const auto options = spawn_options(f.run);
  RunFlags worker = f.run;
  worker.world_size.reset();
  worker.rank.reset();
  // The workers find MASTER_ADDR/MASTER_PORT (those of --dist-url) in their environment.
  worker.dist_url = "env://";
  return launch::spawn([&](int) { return train_process(f, worker); }, f.nprocs, options);
}

}  // namespace

Command add_train_command(CLI::App& root) {
  auto flags = std::make_shared<TrainFlags>();
  auto* app = root.add_subcommand("train", "train an image classifier, data-parallel over the process group");
  add_run_flags(*app, flags->run);
  app->add_option("--epochs", flags->epochs)->capture_default_str();
  app->add_option("--start-epoch", flags->start_epoch, "first epoch when not resuming")->capture_default_str();
  app->add_option("--lr", flags->lr, "base learning rate for a global batch of 256")->capture_default_str();
  app->add_option("--momentum", flags->momentum)->capture_default_str();
  app->add_option("--wd,--weight-decay", flags->weight_decay)->capture_default_str();
  app->add_option("--resume", flags->resume, "checkpoint to continue from exactly");
  app->add_flag("-e,--evaluate", flags->evaluate, "evaluate the model (from --resume or --pretrained) and stop");
  app->add_option("--pretrained", flags->pretrained, "initial weights: a checkpoint or a Python dict(state_dict)");
  app->add_option("--warmup-epochs", flags->warmup_epochs, "linear warm-up length")->capture_default_str();
  app->add_option("--lr-schedule", flags->lr_schedule, "step, multistep, cosine or none")->capture_default_str();
  app->add_option("--lr-step", flags->lr_step, "step schedule: epochs between decays")->capture_default_str();
  app->add_option("--lr-gamma", flags->lr_gamma, "step and multistep: decay factor")->capture_default_str();
  app->add_option("--lr-milestones", flags->lr_milestones, "multistep: decay epochs")->delimiter(',');
  app->add_flag("--sync-bn", flags->sync_bn, "batch-norm statistics over all processes (SyncBatchNorm)");
  app->add_flag("--no-lr-scaling", flags->no_lr_scaling, "use --lr as is, not lr x global batch / 256");
  app->add_option("--output", flags->output, "folder for checkpoints (rank 0 writes)");
  app->add_option("--keep-checkpoints", flags->keep_checkpoints, "epoch checkpoints to keep")->capture_default_str();
  app->add_option("--max-steps", flags->max_steps, "stop after N optimizer steps in all, mid-epoch if need be");
  app->add_option("--mode", flags->mode,
                  "ddp: one process per replica (DistributedDataParallel); dp: one process driving the "
                  "--replicas/--gpus replicas, -b then being the batch per step split over them "
                  "(nn.DataParallel); hvd: Horovod's DistributedOptimizer with broadcast weights")
      ->check(CLI::IsMember({"ddp", "dp", "hvd"}))
      ->capture_default_str();
  app->add_option("--replicas", flags->replicas, "--mode dp: this many CPU replicas");
  app->add_option("--gpus", flags->gpus, "--mode dp: CUDA devices of the replicas, e.g. 0,1 (the first holds the model)")
      ->delimiter(',');
  app->add_flag("--multiprocessing-distributed", flags->multiprocessing_distributed,
                "start one worker per visible GPU (or --nprocs) and supervise them, as mp.spawn; "
                "--world-size is then the number of nodes and --rank this node's index (world = nodes x "
                "workers, rank = node rank x workers + local rank), --dist-url tcp://HOST:PORT the "
                "rendezvous (default: a free local port)");
  app->add_option("--nprocs", flags->nprocs, "--multiprocessing-distributed: workers on this node (default: one per GPU)");
  return {app, [flags](const std::vector<std::string>&) { return run_train(*flags); }};
}

}  // namespace dpt::cli
