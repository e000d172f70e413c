#pragma once
// The server role of a `--mode ps` training job. The job's last ParallelOptions::ps().servers()
// processes serve: they hold shards of the weights and run SGD (dpt::ps::ParameterServer), with
// no data, model replica or trainer of their own; the others are workers and build a Trainer.
// Which one a process is follows from its rank, known before anything is built:
//
//   if (dpt::train::serves_parameters(options)) {
//     auto report = dpt::train::serve_parameters(options);   // until every worker stopped
//   } else {
//     dpt::train::Trainer(options).train();
//   }

#include "dptrain/common/environment.h"
#include "dptrain/parallel/ps/server.h"
#include "dptrain/train/train_options.h"

namespace dpt::train {

// Whether this process is one of a --mode ps job's servers: its rank (the launcher's environment,
// Slurm or the --rank flag, as init_process_group finds it) among the job's last servers.
bool serves_parameters(const TrainOptions& options, const Environment& env = Environment::current());

// Prepares as every process does (the same options, data and model checks, so that bad input fails
// on every rank alike), joins the job and serves the model's trainable parameters until every
// worker has stopped. The weights and momentum come from worker rank 0. Throws DistError when a
// synchronous job cannot go on (a worker was lost), ConfigError for what the servers cannot run.
ps::ServerReport serve_parameters(TrainOptions options);

}  // namespace dpt::train
