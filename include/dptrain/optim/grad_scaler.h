#pragma once
// Loss scaling for mixed-precision training, with torch.cuda.amp.GradScaler's semantics.
//
//   dpt::optim::GradScaler scaler(dpt::optim::GradScalerOptions(), comm);
//   for (...) {
//     optimizer.zero_grad();
//     scaler.scale(loss).backward();
//     scaler.unscale_(optimizer);       // optional: to clip the true gradients
//     scaler.step(optimizer);           // skipped when any rank found inf/NaN
//     scaler.update();                  // back off after a skip, grow after a good run
//   }
//   checkpoint.insert("scaler", scaler.state_dict());
//
// With a communicator, the "found inf" flag is agreed across ranks (a max all-reduce), so every
// rank skips the same steps and the replicas stay identical.
//
// On a GPU nothing is read back, as in PyTorch: the scale and the flag stay on the device, the
// gradients are checked and unscaled by one multi-tensor kernel, FusedSGD skips the step on the
// device (FusedSGD::step_unless_found_inf) and update() is PyTorch's kernel. Reading the flag
// would stall the GPU once a step while the host waited for it and then launched the update.
// Only get_scale(), growth_tracker(), skipped() and state_dict() read, for whoever asks.

#include <cstdint>
#include <memory>
#include <string>
#include <unordered_map>

#include <ATen/core/Dict.h>
#include <ATen/core/ivalue.h>
#include <torch/arg.h>
#include <torch/optim/optimizer.h>

#include "dptrain/dist/communicator.h"

namespace dpt::optim {

struct GradScalerOptions {
  // The scale the first step multiplies the loss by.
  TORCH_ARG(double, init_scale) = 65536.0;
  // The scale is multiplied by this after growth_interval steps in a row without inf/NaN.
  TORCH_ARG(double, growth_factor) = 2.0;
  // The scale is multiplied by this after a step with inf/NaN gradients.
  TORCH_ARG(double, backoff_factor) = 0.5;
  TORCH_ARG(int64_t, growth_interval) = 2000;
  // Off: scale() returns the loss, step() steps, update() does nothing.
  TORCH_ARG(bool, enabled) = true;
};

class GradScaler {
 public:
  // `comm` (optional) agrees the inf/NaN flag across ranks.
  explicit GradScaler(GradScalerOptions options = {}, std::shared_ptr<dist::Communicator> comm = nullptr);
  GradScaler(const GradScaler&) = delete;
  GradScaler& operator=(const GradScaler&) = delete;

  // loss * scale (the loss itself when disabled).
  at::Tensor scale(const at::Tensor& loss);

  // Divides the gradients of `optimizer`'s parameters by the scale, in place, and records whether
  // any of them (on any rank) holds inf or NaN. At most once per optimizer between updates.
  // Collective when the scaler has a communicator: every rank must call it.
  void unscale_(torch::optim::Optimizer& optimizer);

  // Unscales if not yet done, then steps the optimizer unless inf/NaN was found (decided on the
  // GPU where the optimizer is a FusedSGD there; read back first otherwise).
  void step(torch::optim::Optimizer& optimizer);

  // Whether the last step() was skipped for inf/NaN (found on any rank).
  bool skipped() const;

  // Ends the iteration: backs off if any optimizer's gradients held inf/NaN, else counts a good
  // step and grows the scale every growth_interval good steps. Forgets this iteration's
  // optimizers.
  void update();

  // The current scale (1.0 when disabled).
  double get_scale() const;
  int64_t growth_tracker() const;
  bool is_enabled() const { return options_.enabled(); }
  const GradScalerOptions& options() const { return options_; }

  // A dict (string keys) with the keys of PyTorch's GradScaler.state_dict(): scale,
  // growth_factor, backoff_factor, growth_interval, _growth_tracker. Empty when disabled, as in
  // PyTorch.
  c10::impl::GenericDict state_dict() const;
  // Throws CheckpointError naming the missing or mistyped entry.
  void load_state_dict(const c10::impl::GenericDict& state);

 private:
  enum class Stage { Ready, Unscaled, Stepped };
  struct PerOptimizer {
    Stage stage = Stage::Ready;
    at::Tensor found_inf;  // one float, 1 for inf/NaN, beside the scale
  };

  // One float, 1 when any gradient of `optimizer` (on any rank) held inf/NaN; the gradients
  // divided by the scale meanwhile.
  at::Tensor any_non_finite_then_unscale(torch::optim::Optimizer& optimizer) const;
  // The scale and the growth tracker moved to `device` (where the loss is), once.
  void keep_on(const at::Device& device);

  GradScalerOptions options_;
  std::shared_ptr<dist::Communicator> comm_;
  // One float32 like PyTorch's, so the scale and its reciprocal round the same; on the GPU that
  // computes the loss, else on the CPU.
  at::Tensor scale_;
  at::Tensor growth_tracker_;  // one int32, beside the scale
  at::Tensor last_found_inf_;  // the last step()'s flag, for skipped()
  std::unordered_map<const torch::optim::Optimizer*, PerOptimizer> this_iteration_;
};

}  // namespace dpt::optim
