// One optimizer step (train_step.h).
#include "train_step.h"

#include <torch/nn/functional/loss.h>

#include <cmath>
#include <tuple>

#include "dptrain/common/error.h"
#include "dptrain/compat/compat.h"
#include "dptrain/optim/amp.h"

namespace dpt::train {

at::Tensor classification_loss(const at::Tensor& logits, const at::Tensor& targets, double label_smoothing) {
  namespace F = torch::nn::functional;
  return F::cross_entropy(logits, targets, F::CrossEntropyFuncOptions().label_smoothing(label_smoothing));
}

std::pair<at::Tensor, at::Tensor> batch_to_device(const data::Batch& batch, at::Device device, bool channels_last) {
  auto images = batch.images.to(device, /*non_blocking=*/true);
  if (channels_last) images = images.contiguous(at::MemoryFormat::ChannelsLast);
  return {images, batch.labels.to(device, /*non_blocking=*/true)};
}

TrainStep::Forward TrainStep::forward(const at::Tensor& images, const at::Tensor& targets) {
  const double smoothing = parts_.options.loss().label_smoothing();
  at::Tensor logits;
  std::vector<models::AuxiliaryLogits> auxiliary;
  {
    compat::AutocastGuard autocast(parts_.device.type(), optim::amp_dtype(parts_.device), parts_.options.amp());
    logits = parts_.style.forward(images);
    // Every style's training forward runs this process's model (--mode dp refuses heads).
    auxiliary = parts_.model->take_auxiliary_logits();
  }
  logits = logits.to(at::kFloat);
  auto loss = classification_loss(logits, targets, smoothing);
  auto objective = loss;
  for (const auto& head : auxiliary) {
    objective = objective + head.loss_weight * classification_loss(head.logits.to(at::kFloat), targets, smoothing);
  }
  return {logits, loss, objective};
}

at::Tensor TrainStep::mix(at::Tensor& images, const at::Tensor& labels, int64_t k, const StepPosition& at) const {
  constexpr uint64_t kMixingStream = 0x6d6978696e67;  // apart from the per-sample crop streams
  data::SampleRng rng(parts_.options.seed() ^ kMixingStream, at.epoch,
                      (at.step_in_epoch * at.accum_steps + k) * at.world_size + at.rank);
  return parts_.mixing.apply(images, labels, parts_.mixing.draw(rng, images.size(2), images.size(3)));
}

MetricSums TrainStep::forward_backward(const std::vector<data::Batch>& micro_batches, const StepPosition& at) {
  int64_t step_samples = 0;
  for (const auto& batch : micro_batches) step_samples += batch.labels.size(0);
  parts_.style.zero_grad();
  MetricSums local;
  for (size_t k = 0; k < micro_batches.size(); ++k) {
    at::Tensor images, labels, targets;
    {
      StepPhaseTimer copying(parts_.phases, StepPhase::CopyToDevice, at.number);
      std::tie(images, labels) = batch_to_device(micro_batches[k], parts_.device, parts_.options.channels_last());
      targets = parts_.mixing.enabled() ? mix(images, labels, static_cast<int64_t>(k), at) : labels;
    }
    Forward forwarded;
    {
      StepPhaseTimer forwarding(parts_.phases, StepPhase::Forward, at.number);
      forwarded = forward(images, targets);
    }
    // Each micro-batch's mean loss weighted by its share of the step's samples: the gradient of the
    // whole step's mean loss, as if its micro-batches were one batch.
    const at::Tensor step_loss =
        micro_batches.size() == 1
            ? forwarded.objective
            : forwarded.objective * (static_cast<double>(labels.size(0)) / static_cast<double>(step_samples));
    const bool reduce = k + 1 == micro_batches.size();
    {
      StepPhaseTimer backward(parts_.phases, StepPhase::Backward, at.number);
      parts_.style.backward(parts_.scaler.scale(step_loss), reduce);
    }
    if (reduce) trace_reduction(at.number);
    // A mixed sample counts as its larger class, as torchvision's accuracy takes it.
    local.add(forwarded.logits.detach(), parts_.mixing.enabled() ? targets.argmax(1) : labels,
              forwarded.loss.item<double>());
  }
  StepPhaseTimer synchronizing(parts_.phases, StepPhase::Synchronize, at.number);
  parts_.style.synchronize();
  return local;
}

void TrainStep::update(const MetricSums& all, const StepPosition& at) {
  if (!parts_.scaler.is_enabled()) {
    DPT_CHECK(std::isfinite(all.loss_sum), Error, "rank ", at.rank, ": the loss is not finite at step ", at.number,
              " (epoch ", at.epoch + 1, ", step ", at.step_in_epoch + 1,
              "); lower --lr or lengthen --warmup-epochs");
  }
  StepPhaseTimer stepping(parts_.phases, StepPhase::Optimizer, at.number);
  if (!parts_.style.applies_update()) {
    torch::optim::Optimizer& optimizer = *parts_.style.optimizer();
    if (const auto max_norm = parts_.options.optimizer().clip_grad_norm()) {
      // On the reduced gradients, so every rank clips alike; unscaled first, as torchvision does.
      parts_.scaler.unscale_(optimizer);
      parts_.style.clip_grad_norm(*max_norm);
    }
    parts_.scaler.step(optimizer);
    parts_.scaler.update();
  }
  if (parts_.ema && at.step_in_epoch % parts_.options.model_ema()->steps() == 0) {
    parts_.ema->update(*parts_.model);
    // During warm-up the average keeps copying the weights, as torchvision's recipe does.
    if (at.epoch < parts_.options.schedule().warmup_epochs()) parts_.ema->reset();
  }
}

void TrainStep::trace_reduction(int64_t step) const {
  const Reducer* reducer = parts_.style.reducer();
  if (reducer == nullptr) return;
  const ReductionTimes times = reducer->last_reduction();
  if (parts_.timeline) {
    for (size_t b = 0; b < times.buckets.size(); ++b) {
      const auto& bucket = times.buckets[b];
      parts_.timeline->add(Timeline::Track::Communication, str("bucket ", b), bucket.launched, bucket.completed,
                           {{"step", step}, {"bytes", bucket.bytes}, {"reduced_bytes", bucket.reduced_bytes}});
    }
  }
  if (parts_.phases != nullptr) {
    parts_.phases->on_phase(StepPhase::WaitForCommunication, times.wait_began, times.finished, step);
  }
}

}  // namespace dpt::train
