#pragma once
// What each way of training in parallel (ParallelOptions::mode) says of itself before one is built:
// which of the flags that belong to some styles only it takes, whether it runs as one process,
// which processes of the job train and which serve, and where its model lives. The command line,
// the option checks, the trainer's join and its banner ask it; only the styles know their modes,
// as Horovod's operations say whether they apply rather than their callers deciding for them.
//
//   const dpt::train::StyleTraits& style = dpt::train::style_traits(options.parallel().mode());
//   if (!style.accepts(dpt::train::StyleFlag::Zero)) throw ConfigError(style.refusal(StyleFlag::Zero));
//   dpt::train::check_style_options(options);   // every flag options use, asked of their style

#include <memory>
#include <string>

#include "dptrain/common/environment.h"
#include "dptrain/dist/communicator.h"
#include "dptrain/train/train_options.h"

namespace dpt::train {

// The flags (or groups of flags) that some styles take and others refuse.
enum class StyleFlag {
  Zero,             // --zero 1 or 2
  Buckets,          // --bucket-cap-mb, --first-bucket-cap-mb, --last-bucket-cap-mb, --find-unused-parameters
  ParameterServer,  // --ps-servers, --ps-sync, --ps-async, --ps-staleness
  Replicas,         // --replicas, --gpus
  SyncBn,           // --sync-bn
  Amp,              // --amp
  AccumSteps,       // --accum-steps above 1
  ClipGradNorm,     // --clip-grad-norm
  CommHook,         // --comm-hook other than allreduce
};
// The flags as the command line spells them: "--replicas and --gpus".
std::string to_string(StyleFlag flag);

class StyleTraits {
 public:
  virtual ~StyleTraits() = default;

  virtual ParallelMode mode() const = 0;
  // Whether this style takes `flag`.
  virtual bool accepts(StyleFlag flag) const = 0;
  // Why it does not, and what to do: by default the flag and the modes that take it ("--zero
  // belongs to --mode ddp").
  virtual std::string refusal(StyleFlag flag) const;
  // ConfigError for what else of `options` this style cannot run (the parameter server's SGD).
  virtual void check(const TrainOptions& /*options*/) const {}
  // Whether the style is one process driving its replicas (no launcher, no spawn).
  virtual bool one_process() const { return false; }
  // Whether this process of the job (as `env` places it) serves rather than trains: the parameter
  // servers, whose role is decided before a trainer is built (ps_server_role.h).
  virtual bool serves(const TrainOptions& /*options*/, const Environment& /*env*/) const { return false; }
  // The ranks that train, out of the whole job's (collective where it forms a new group).
  virtual std::shared_ptr<dist::Communicator> trainers(std::shared_ptr<dist::Communicator> job,
                                                       const ParallelOptions& /*options*/) const {
    return job;
  }
  // Where the model lives, given the device this process was given (--gpu, or its communicator's).
  virtual at::Device model_device(at::Device process_device, const ParallelOptions& /*options*/) const {
    return process_device;
  }
};

// The style of `mode`; every one lives as long as the program.
const StyleTraits& style_traits(ParallelMode mode);

// ConfigError naming the first flag `options` uses (--zero, --sync-bn, --amp, --accum-steps above
// 1, --clip-grad-norm) that its style refuses, then the style's own check().
void check_style_options(const TrainOptions& options);

}  // namespace dpt::train
