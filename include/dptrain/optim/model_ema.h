#pragma once
// An exponential moving average of a model's weights and buffers, as torchvision's recipes keep
// it (`--model-ema`: utils.ExponentialMovingAverage, an AveragedModel with use_buffers=True):
//
//   dpt::optim::ModelEma ema(model, dpt::optim::ema_decay(dpt::optim::ModelEmaOptions(), global_batch, epochs));
//   ... optimizer.step(); if (step % 32 == 0) ema.update(*model);
//   evaluate(ema.module());
//   checkpoint.insert("model_ema", ema.state_dict());   // AveragedModel.state_dict()'s names
//
// update() takes every parameter and buffer of the model in order: the first update (and the
// first after reset()) copies them, later ones mix decay x average + (1 - decay) x model, in the
// model's dtype (integer buffers such as num_batches_tracked truncated, as in Python).

#include <cstdint>

#include <torch/arg.h>

#include "dptrain/models/classifier.h"
#include "dptrain/models/state_dict.h"

namespace dpt::optim {

struct ModelEmaOptions {
  // Optimizer steps between updates (torchvision's --model-ema-steps).
  TORCH_ARG(int64_t, steps) = 32;
  // The decay per sample-normalised update (--model-ema-decay), adjusted by ema_decay().
  TORCH_ARG(double, decay) = 0.99998;
};

// torchvision's adjustment of the decay for the run's global batch, update interval and length:
// 1 - min(1, (1 - decay) x global_batch x steps / epochs).
double ema_decay(const ModelEmaOptions& options, int64_t global_batch, int64_t epochs);

class ModelEma {
 public:
  // A copy of `model` (clone()); ConfigError for a model that cannot be copied.
  ModelEma(const models::Classifier& model, double decay);

  void update(const torch::nn::Module& model);
  // The next update copies the model again (torchvision does this during warm-up).
  void reset() { n_averaged_ = 0; }
  int64_t n_averaged() const { return n_averaged_; }
  double decay() const { return decay_; }
  models::Classifier& module() { return module_; }

  // {"n_averaged": long, "module.<name>": ...}, the state dict of Python's AveragedModel.
  models::StateDict state_dict() const;
  // CheckpointError when entries are missing or have other shapes.
  void load_state_dict(const models::StateDict& state);

 private:
  models::Classifier module_;
  double decay_;
  int64_t n_averaged_ = 0;
};

}  // namespace dpt::optim
