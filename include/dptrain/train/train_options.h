#pragma once
// Everything a training or evaluation run is configured with; the command line fills it in
// (`dptrain train`, `dptrain eval`), library users set it directly.
//
//   auto options = dpt::train::TrainOptions("resnet20").epochs(3).batch_size(64);
//   options.data().dummy(true);
//   options.schedule().base_lr(0.1).warmup_epochs(1);
//   options.checkpoint().output_dir("run1");
//   options.observers().push_back(std::make_shared<MyObserver>());
//   dpt::train::Trainer(options).train();

#include <csignal>
#include <cstdint>
#include <memory>
#include <functional>
#include <optional>
#include <ostream>
#include <string>
#include <vector>

#include <torch/arg.h>

#include "dptrain/common/on_failure.h"
#include "dptrain/common/log_stream.h"
#include "dptrain/data/auto_augment.h"
#include "dptrain/data/dataset.h"
#include "dptrain/data/interpolation.h"
#include "dptrain/data/shard_cache.h"
#include "dptrain/dist/heartbeat.h"
#include "dptrain/dist/init.h"
#include "dptrain/parallel/comm_hook_options.h"
#include "dptrain/parallel/ps/options.h"
#include "dptrain/parallel/reducer.h"
#include "dptrain/train/batch_mixing.h"
#include "dptrain/optim/lr_schedule.h"
#include "dptrain/optim/model_ema.h"
#include "dptrain/optim/optimizer.h"
#include "dptrain/train/straggler_watch.h"
#include "dptrain/train/logs/observers.h"
#include "dptrain/train/logs/report.h"

namespace dpt::train {

// How the replicas agree on a step: DistributedDataParallel (one process per replica),
// DataParallel (one process driving several replicas; batch_size is then the whole step's batch,
// split over them), Horovod's DistributedOptimizer with broadcast weights, or a parameter server
// (the job's last ParallelOptions::ps().servers() processes hold the weights and run SGD; the
// others are the workers the rest of these options speak of).
enum class ParallelMode { Ddp, Dp, Hvd, Ps };
// "ddp", "dp", "hvd" or "ps"; ConfigError for anything else.
ParallelMode parse_parallel_mode(const std::string& name);
std::string to_string(ParallelMode mode);

// What is trained on, and how each image is read and augmented.
struct DataOptions {
  // An ImageFolder root with train/ and val/, or a CIFAR-10 binary folder (data_batch_*.bin);
  // ignored with dummy.
  TORCH_ARG(std::string, root) = "";
  // Train on the learnable synthetic set instead of `root`.
  TORCH_ARG(bool, dummy) = false;
  TORCH_ARG(int64_t, dummy_train_size) = 4000;
  // Odd by default, so that evaluation over two ranks has unequal shards.
  TORCH_ARG(int64_t, dummy_val_size) = 1001;
  // Classes of the synthetic set (1000 gives ImageNet's classifier, e.g. to size checkpoints).
  TORCH_ARG(int64_t, dummy_classes) = 10;
  // Side of the network's input. Unset: 224 for ImageFolder data, 32 for CIFAR and the dummy set.
  TORCH_ARG(std::optional<int>, image_size) = std::nullopt;
  // torchvision's --train-crop-size, --val-crop-size and --val-resize-size, each overriding what
  // image_size (or the model's defaults) gives; the network is built for the training crop.
  TORCH_ARG(std::optional<int>, train_crop_size) = std::nullopt;
  TORCH_ARG(std::optional<int>, val_crop_size) = std::nullopt;
  TORCH_ARG(std::optional<int>, val_resize_size) = std::nullopt;
  // Probability of torchvision's RandomErasing on each training sample (--random-erase).
  TORCH_ARG(double, random_erase) = 0.0;
  // An automatic augmentation policy on each training crop (--auto-augment); its geometric ops
  // take the resize filter.
  TORCH_ARG(std::optional<data::AutoAugmentOptions>, auto_augment) = std::nullopt;
  // Repeated augmentation (--ra-sampler --ra-reps): each sample this many times per epoch, each
  // copy augmented on its own, on neighbouring ranks (torchvision's RASampler); 1: off.
  TORCH_ARG(int64_t, repeated_augmentations) = 1;
  // A training set kept in shards is shuffled a few shards at a time (data::SamplerOptions'
  // shard_sizes): this many shards are read at once. 0: one permutation of all samples, as for a
  // folder (for shards on local disk or in the page cache, where a random read costs no more).
  TORCH_ARG(int64_t, open_shards) = 8;
  // Where the shards of a remote set (http://, https://, s3://) are kept, shared by the processes
  // of a machine, how many bytes of them at most and how many are fetched at once (data::ShardCache).
  TORCH_ARG(data::ShardCacheOptions, shard_cache);
  // The resize filter. Unset: bilinear, except for ImageFolder data, which takes the model's
  // (that of torchvision's weights: bicubic for most EfficientNets, ViT-H/14 and DeiT).
  TORCH_ARG(std::optional<data::Interpolation>, interpolation) = std::nullopt;
  // Random horizontal flips in training (off for data where mirroring changes the class, e.g. digits).
  TORCH_ARG(bool, flip) = true;
  // Loader threads per process.
  TORCH_ARG(int, workers) = 4;
  TORCH_ARG(data::BadImagePolicy, bad_images) = data::BadImagePolicy::Skip;
  // Skipped bad images stop the run when they are more than this fraction of a pass's images
  // (bad_images.h); a pass without one usable image always does.
  TORCH_ARG(double, max_bad_images) = 0.01;
};

// What the training loss is computed on (torchvision's --label-smoothing, --mixup-alpha,
// --cutmix-alpha). Training metrics score the logits against each mixed target's larger class.
struct LossOptions {
  // Cross-entropy against (1 - s) x the target + s / classes, in training and validation.
  TORCH_ARG(double, label_smoothing) = 0.0;
  TORCH_ARG(BatchMixingOptions, mixing) = {};
};

// Where a run starts from and what it leaves behind.
struct CheckpointOptions {
  // A checkpoint to continue from exactly, or "auto" (kResumeAuto): the newest readable one in
  // output_dir, or a fresh start when there is none yet (see find_resume_checkpoint).
  TORCH_ARG(std::string, resume) = "";
  // Initial weights: a dptrain checkpoint or a Python-saved dict(model.state_dict()).
  TORCH_ARG(std::string, pretrained) = "";
  // Where rank 0 writes checkpoint.pt, checkpoint_epoch<N>.pt and model_best.pt; empty: nowhere.
  TORCH_ARG(std::string, output_dir) = "";
  // Epoch checkpoints kept; older ones are deleted.
  TORCH_ARG(int64_t, keep) = 3;
  // Also rewrite checkpoint.pt during an epoch: after every this many optimizer steps, and/or when
  // this many minutes have passed since the last checkpoint (rank 0's clock). Unset: at the end
  // of each epoch only (and at a max_steps stop).
  TORCH_ARG(std::optional<int64_t>, every_steps) = std::nullopt;
  TORCH_ARG(std::optional<double>, every_minutes) = std::nullopt;
  // Write on a background thread (CheckpointWriter): training pauses only to copy the state to
  // host memory. False: rank 0 writes in the training thread and the other ranks wait for it.
  TORCH_ARG(bool, in_background) = true;
  // Signals that stop training (see StopSignals) while train() runs: after the step every rank
  // agrees on, rank 0 writes checkpoint.pt (when output_dir is set) and train() returns with
  // TrainResult::stopped_on_request. Empty: signals keep their handlers (a program's own, or the
  // default, which ends the process).
  TORCH_ARG(std::vector<int>, stop_signals) = std::vector<int>{SIGTERM, SIGUSR1};
};

// How the replicas are placed and agree on a step.
struct ParallelOptions {
  TORCH_ARG(ParallelMode, mode) = ParallelMode::Ddp;
  // How to join the process group (rank, world size, rendezvous, backend, timeout).
  TORCH_ARG(dist::InitOptions, dist) = {};
  // Every rank watches another's heartbeat while it trains (dist/heartbeat.h): a rank stopped,
  // killed unnoticed or lost with its machine is named within a few step times, and the ranks that
  // named it exit for the launcher to restart or re-form the group, instead of waiting in a
  // collective for `dist`'s timeout. Unset: off. (Not for ranks that never wait for each other:
  // an asynchronous parameter server's workers.)
  TORCH_ARG(std::optional<dist::HeartbeatOptions>, heartbeat) = dist::HeartbeatOptions();
  // When a rank is lost while the ranks train: Restart leaves it to the launcher (the ranks that
  // find the loss exit; --max-restarts, --resume auto); Continue keeps the others going in-process
  // (train/...: the step in flight is dropped, the group re-formed without the lost rank, the rest
  // of the epoch re-dealt over the ranks left). Continue needs the heartbeat and a launcher that
  // leaves the others running (dptrain launch --on-failure continue); mode ddp over Gloo, without
  // ZeRO or --sync-bn.
  TORCH_ARG(OnFailure, on_failure) = OnFailure::Restart;
  // CUDA device index for this process. Unset: the communicator's device (the local rank's GPU
  // under NCCL, else the CPU).
  TORCH_ARG(std::optional<int>, gpu) = std::nullopt;
  // Mode Dp: this many replicas on the CPU, or the listed CUDA devices (the first holds the model).
  TORCH_ARG(std::optional<int>, replicas) = std::nullopt;
  TORCH_ARG(std::vector<int>, gpus) = {};
  // Batch statistics over all ranks (SyncBatchNorm): every BatchNorm layer is converted before
  // DistributedDataParallel wraps the model; checkpoints keep BatchNorm's names.
  TORCH_ARG(bool, sync_bn) = false;
  // Modes Ddp and Ps: how the gradients are cut into buckets, each reduced (or pushed) as soon as
  // backward has filled it (DDP's bucket_cap_mb, the small first and last buckets, unused
  // parameters). Gradients always alias their bucket (PyTorch's gradient_as_bucket_view): no copy.
  TORCH_ARG(ReducerOptions, reducer) = {};
  // Mode Ddp: choose reducer.bucket_cap_mb by measuring the first steps under a few sizes
  // (BucketTuner), and say the choice; checkpoints keep it. Not with ZeRO-2 (its optimizer is cut
  // from the buckets), PowerSGD (its state is kept per bucket) or deterministic runs (with more than
  // two ranks the buckets set the order of the sums): those keep reducer.bucket_cap_mb.
  TORCH_ARG(bool, tune_buckets) = false;
  // Mode Ddp: how each bucket is reduced (the mean, halved to fp16 or bf16, or compressed by
  // PowerSGD, whose state the checkpoints keep).
  TORCH_ARG(CommHookOptions, comm_hook) = {};
  // Mode Ps: the servers and the consistency model (its buckets are `reducer`'s, its timeout
  // `dist`'s).
  TORCH_ARG(ps::PsOptions, ps) = {};
  // Mode Ddp: ZeRO stage 1 (ZeroRedundancyOptimizer) shards the optimizer state over the ranks,
  // each stepping its shard; stage 2 (ZeroStage2Optimizer) also the reduced gradients, each bucket
  // reduce-scattered; 0 keeps a whole optimizer on every rank. Checkpoints stay whole.
  TORCH_ARG(int, zero_stage) = 0;
};

struct TrainOptions {
  explicit TrainOptions(std::string arch) : arch_(std::move(arch)) {}

  // A model name of dpt::models::names().
  TORCH_ARG(std::string, arch);
  // Build GoogLeNet's and Inception v3's auxiliary classifiers and add their weighted losses in
  // training (ClassifierOptions::aux_logits); a checkpoint then carries them.
  TORCH_ARG(bool, aux_logits) = true;
  // The classifier's dropout probability (ClassifierOptions::dropout): unset, the model's own
  // (torchvision's); 0 turns every dropout of the model off.
  TORCH_ARG(std::optional<double>, dropout) = std::nullopt;
  TORCH_ARG(int64_t, epochs) = 90;
  // First epoch when not resuming (the schedule starts there as if earlier epochs had run).
  TORCH_ARG(int64_t, start_epoch) = 0;
  // Samples per step on each process; the global batch is this times the world size. Mode Dp:
  // samples per step, split over the replicas.
  TORCH_ARG(int64_t, batch_size) = 256;
  // Micro-batches of batch_size per optimizer step, their gradients reduced once, with the last
  // (DDP's no_sync() before the others): the global batch is batch_size x world size x this.
  TORCH_ARG(int64_t, accum_steps) = 1;
  // Stop after this many optimizer steps in all (resumed steps included), mid-epoch if need be.
  TORCH_ARG(std::optional<int64_t>, max_steps) = std::nullopt;
  // Seeds the weights (the same on every rank), the sampler's shuffles and the augmentation.
  TORCH_ARG(uint64_t, seed) = 0;
  // bf16 autocast on CPU; fp16 autocast with loss scaling on CUDA.
  TORCH_ARG(bool, amp) = false;
  TORCH_ARG(bool, channels_last) = false;
  // Bitwise-repeatable CPU runs: one compute thread per process, deterministic algorithms.
  TORCH_ARG(bool, deterministic) = false;

  TORCH_ARG(DataOptions, data) = {};
  // The learning rate: base_lr for a global batch of reference_batch (linear scaling; unset: the
  // rate as given), warm-up and decay. The trainer sets global_batch (batch_size x world size) and
  // epochs (those above) itself.
  TORCH_ARG(optim::LrScheduleOptions, schedule) = optim::LrScheduleOptions(0.1);
  // The optimizer and its parameter groups; its rate is the schedule's.
  TORCH_ARG(optim::OptimizerOptions, optimizer) = {};
  TORCH_ARG(LossOptions, loss) = {};
  // An exponential moving average of the weights, validated after each epoch beside the model and
  // checkpointed as "model_ema". Unset: none.
  TORCH_ARG(std::optional<optim::ModelEmaOptions>, model_ema) = std::nullopt;
  TORCH_ARG(CheckpointOptions, checkpoint) = {};
  TORCH_ARG(ParallelOptions, parallel) = {};

  // Told about every step and epoch, on rank 0 only.
  TORCH_ARG(std::vector<std::shared_ptr<TrainObserver>>, observers) = {};
  // The standard logs, made on rank 0 once ranks are known (so other ranks create no files) and
  // added to the observers: console progress, plus metrics.jsonl and TensorBoard event files in
  // checkpoint.output_dir when LogOptions has no folder of its own. Unset: none.
  TORCH_ARG(std::optional<LogOptions>, logs) = std::nullopt;
  // Every rank's timeline of its steps (logs/timeline.h), each in timeline_path(timeline, rank).
  // Empty: none.
  TORCH_ARG(std::string, timeline) = "";
  // Every rank's trained samples, step by step (logs/sample_log.h), each in timeline_path(sample_log, rank).
  // Empty: none.
  TORCH_ARG(std::string, sample_log) = "";
  // Naming a rank that stays slower than the others (StragglerWatch; threshold 0: off).
  TORCH_ARG(StragglerOptions, stragglers) = {};
  // The attainable FLOP/s of one unit that runs a rank's math (a CPU thread; a GPU) for a device
  // type ("cpu", "cuda") and precision ("fp32", "bf16", "fp16"), as `dptrain bench-peak` measures
  // it, or nullopt: the reports then give the model's FLOP/s as a fraction of every unit's (ranks
  // x threads on the CPU) for the run's device and precision. Unset: model FLOP/s only.
  using PeakLookup = std::function<std::optional<double>(const std::string& device, const std::string& precision)>;
  TORCH_ARG(PeakLookup, peak_flop_per_s) = nullptr;
  // Where rank 0 writes the start-up banner; null: nowhere.
  TORCH_ARG(LogStream, log) = nullptr;
};

// Throws ConfigError naming the flag when no run can start with `options` (a batch, epoch or step
// count out of range, checkpoint options that contradict each other); checks nothing on disk.
void check_options(const TrainOptions& options);

}  // namespace dpt::train
