#pragma once
// The ImageNet-style training loop of pytorch/examples' main.py, data-parallel: every process
// trains a replica on its shard (DistributedSampler), gradients are averaged during backward
// (DistributedDataParallel; TrainOptions::parallel().mode() picks Horovod's DistributedOptimizer or one
// process driving DataParallel replicas instead), validation counts are summed over ranks
// exactly, rank 0 reports to the observers and writes checkpoints (the plain model's names in
// every mode).
//
//   auto options = dpt::train::TrainOptions("resnet50").batch_size(64);
//   options.data().root("/data/imagenet");
//   options.schedule().warmup_epochs(5);
//   options.checkpoint().output_dir("run1");
//   options.observers().push_back(progress);
//   dpt::train::Trainer trainer(options);   // checks data, model and files, then joins the group
//   trainer.train();
//
// Construction checks everything that can be checked locally (data folders, model name,
// checkpoint files) before joining the process group, so bad input fails at once on every rank
// instead of leaving the others waiting.

#include <memory>
#include <optional>

#include "dptrain/train/metrics.h"
#include "dptrain/train/train_options.h"

namespace dpt::train {

struct TrainResult {
  int64_t epochs_done = 0;   // epochs completed, resumed ones included
  int64_t global_step = 0;   // optimizer steps taken, resumed ones included
  double best_acc1 = 0;      // best validation top-1, percent
  MetricSums last_val;       // the last validation pass, over all ranks
  std::optional<MetricSums> last_val_ema;  // the same for the model's EMA (--model-ema)
  // A stop signal reached some rank (CheckpointOptions::stop_signals): every rank stopped after
  // the same step, and checkpoint.pt holds it.
  bool stopped_on_request = false;
};

class Trainer {
 public:
  explicit Trainer(TrainOptions options);
  ~Trainer();
  Trainer(const Trainer&) = delete;
  Trainer& operator=(const Trainer&) = delete;

  // Trains until `epochs` are done or `max_steps` optimizer steps were taken, validating after
  // each epoch and checkpointing into output_dir. Collective.
  TrainResult train();

  // One validation pass over the whole validation set, split over the ranks; the sums are over
  // all ranks. Reports a "val" EpochReport. Collective. Before train(), ConfigError when the
  // classifier is random because --pretrained's weights were made for other classes.
  MetricSums evaluate();

  int rank() const;
  int world_size() const;

 private:
  struct State;
  std::unique_ptr<State> state_;
};

}  // namespace dpt::train
