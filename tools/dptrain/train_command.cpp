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
#include "dptrain/train/style_traits.h"
#include "dptrain/train/trainer.h"
#include "slurm_requeue.h"
#include "train_flags.h"

namespace dpt::cli {

namespace {

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
  DPT_CHECK(!train::style_traits(f.options.parallel().mode()).one_process(), ConfigError, "--mode ",
            train::to_string(f.options.parallel().mode()),
            " is one process; it cannot be combined with --multiprocessing-distributed");
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

}  // namespace

Command add_train_command(CLI::App& root) {
  auto flags = std::make_shared<TrainFlags>();
  auto switched = std::make_shared<SwitchedFlags>(flags->options);
  auto* app = root.add_subcommand("train", "Train an image classifier, data-parallel over the process group");
  add_train_flags(*app, *flags, *switched);
  return {app, [flags, switched, app](const std::vector<std::string>&) {
            finish_train_flags(*app, *flags, *switched);
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
