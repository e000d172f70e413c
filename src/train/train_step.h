#pragma once
// One optimizer step of training, apart from the run around it (trainer_state.h): each
// micro-batch's copy to the device, its mixing, the forward in --amp's precision and the backward
// (the gradients reduced with the last micro-batch's), the style's synchronization, the
// reduction's trace on the timeline and, once the ranks' sums are known, the update: clipping,
// loss scaling, the optimizer (unless the style applied it), the EMA. It holds the run's parts by
// reference and no state of its own, so what a step does follows from its inputs: the parts, the
// micro-batches and where the step stands (StepPosition).
//
//   TrainStep step(parts);
//   MetricSums local = step.forward_backward(micro_batches, at);   // this rank's
//   MetricSums all = style.lockstep().sum(local);                   // every rank's
//   step.update(all, at);

#include <cstdint>
#include <utility>
#include <vector>

#include <ATen/ATen.h>

#include "dptrain/data/loader.h"
#include "dptrain/models/classifier.h"
#include "dptrain/train/batch_mixing.h"
#include "dptrain/optim/grad_scaler.h"
#include "dptrain/train/logs/step_phase.h"
#include "dptrain/train/logs/timeline.h"
#include "dptrain/train/metrics.h"
#include "dptrain/optim/model_ema.h"
#include "dptrain/train/train_options.h"
#include "parallel_style.h"

namespace dpt::train {

// Cross-entropy against class indices or soft (mixed) targets, with --label-smoothing.
at::Tensor classification_loss(const at::Tensor& logits, const at::Tensor& targets, double label_smoothing);
// A batch's images and labels on `device` (a GPU's batches are there already: DevicePrefetcher),
// the images channels_last with --channels-last (a CPU run's loader made them so already).
std::pair<at::Tensor, at::Tensor> batch_to_device(const data::Batch& batch, at::Device device, bool channels_last);

// What a step works with: the run's parts, owned by the trainer.
struct StepParts {
  const TrainOptions& options;
  models::Classifier model;
  at::Device device;
  ParallelStyle& style;
  optim::GradScaler& scaler;
  const BatchMixing& mixing;
  optim::ModelEma* ema;          // --model-ema; else null
  StepPhaseHook* phases;  // who hears of the step's phases (the straggler watch, the timeline); null: nobody
  Timeline* timeline;     // this rank's, with --timeline; else null
};

// Where a step stands: what mixing's draws, the EMA's schedule and the messages depend on.
struct StepPosition {
  int64_t epoch = 0;
  int64_t step_in_epoch = 0;  // the epoch's steps before this one
  int64_t number = 1;         // in the run, counted from 1 as logs and messages count
  int64_t accum_steps = 1;    // micro-batches of a whole step
  int rank = 0;
  int world_size = 1;
};

class TrainStep {
 public:
  explicit TrainStep(StepParts parts) : parts_(std::move(parts)) {}

  // Every micro-batch's forward and backward, the last one's gradients reduced, then the style's
  // synchronization: this rank's sums of the micro-batches' losses and scores.
  MetricSums forward_backward(const std::vector<data::Batch>& micro_batches, const StepPosition& at);

  // With `all`, the step's sums over every rank: the update. A loss that is not finite on any rank
  // makes the sum not finite on every rank, so all decide alike: the scaler skips such a step,
  // and without one it is an Error (continuing would spread NaN into the weights).
  void update(const MetricSums& all, const StepPosition& at);

 private:
  // `loss` is the logits' (what the metrics report); `objective`, what backward differentiates,
  // adds the auxiliary classifiers' weighted losses (GoogLeNet, Inception v3).
  struct Forward {
    at::Tensor logits, loss, objective;
  };
  // The training forward pass and losses, in the precision --amp asks for: bf16 autocast on the
  // CPU, fp16 on CUDA. The losses are computed in float32 outside autocast. `targets`: class
  // indices, or soft targets [N, classes] of a mixed batch.
  Forward forward(const at::Tensor& images, const at::Tensor& targets);
  // --mixup-alpha, --cutmix-alpha: mixes micro-batch `k` in place and returns its soft targets.
  // The draws depend on (seed, epoch, step, micro-batch, rank) only, so a resumed run draws what
  // an uninterrupted one would.
  at::Tensor mix(at::Tensor& images, const at::Tensor& labels, int64_t k, const StepPosition& at) const;
  // After a backward that reduced: its buckets' all-reduces on the timeline's communication track,
  // and the wait for them after backward's compute on the training track.
  void trace_reduction(int64_t step) const;

  StepParts parts_;
};

}  // namespace dpt::train
