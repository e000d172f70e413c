#pragma once
// `dptrain train`'s command line: the flags it adds to the run flags it shares with `dptrain eval`
// (run_flags.h), what they fill in, and the checks of their combination. Apart from
// train_command.cpp, which runs a training, so that fuzz/train_cli_fuzzer.cpp can parse and check
// command lines without starting one.

#include <optional>
#include <string>

#include <CLI/CLI.hpp>

#include "dptrain/dist/init.h"
#include "dptrain/launch/spawn.h"
#include "dptrain/train/train_options.h"
#include "run_flags.h"

namespace dpt::cli {

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

  OptionalFlags<optim::ModelEmaOptions> model_ema;
  OptionalFlags<data::AutoAugmentOptions> auto_augment;
  bool ra_sampler = false;
  int64_t ra_reps = 3;

  void finish(train::TrainOptions& options) {
    model_ema.finish();
    auto_augment.finish();
    if (ra_sampler) options.data().repeated_augmentations(ra_reps);
  }
};

// Binds every flag of `dptrain train` to `flags` and `switched`, which must outlive the parse.
void add_train_flags(CLI::App& app, TrainFlags& flags, SwitchedFlags& switched);

// After the parse: flags given for another --mode are a ConfigError; the switched groups are handed
// to the options.
void finish_train_flags(const CLI::App& app, TrainFlags& flags, SwitchedFlags& switched);

// "tcp://HOST:PORT" -> spawn's rendezvous; env:// (the default) -> a free port on this host.
launch::SpawnOptions spawn_options(const dist::InitOptions& dist);

}  // namespace dpt::cli
