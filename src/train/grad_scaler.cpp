#include "dptrain/train/grad_scaler.h"

#include <algorithm>
#include <cmath>
#include <vector>

#include <ATen/Functions.h>

#include <torch/utils.h>

#include "dptrain/common/error.h"

namespace dpt::train {

GradScaler::GradScaler(GradScalerOptions options, std::shared_ptr<dist::Communicator> comm)
    : options_(std::move(options)), comm_(std::move(comm)), scale_(static_cast<float>(options_.init_scale())) {
  DPT_CHECK(options_.init_scale() > 0 && std::isfinite(scale_), ConfigError,
            "the initial loss scale must be positive and finite in float32, got ",
            options_.init_scale());
  DPT_CHECK(options_.growth_factor() > 1.0, ConfigError,
            "the loss-scale growth factor must be above 1, got ", options_.growth_factor());
  DPT_CHECK(options_.backoff_factor() > 0 && options_.backoff_factor() < 1.0, ConfigError,
            "the loss-scale backoff factor must lie strictly between 0 and 1, got ",
            options_.backoff_factor());
  DPT_CHECK(options_.growth_interval() > 0, ConfigError,
            "the loss-scale growth interval must be positive, got ", options_.growth_interval());
}

at::Tensor GradScaler::scale(const at::Tensor& loss) const {
  if (!options_.enabled()) return loss;
  return loss * scale_;
}

bool GradScaler::any_non_finite_then_unscale(torch::optim::Optimizer& optimizer) const {
  // PyTorch computes the reciprocal in double and rounds it to float32 once; for the usual
  // power-of-two scales this makes unscaling exact.
  const float inv_scale = static_cast<float>(1.0 / static_cast<double>(scale_));
  torch::NoGradGuard no_grad;
  // One flag accumulated on the device, read once: no host synchronization per gradient.
  at::Tensor found;
  const auto accumulate = [&found](const at::Tensor& here) {
    found = found.defined() ? found.logical_or(here.to(found.device())) : here;
  };
  // Gradients on a GPU go through PyTorch's own check-and-unscale, one multi-tensor kernel per
  // device and type (as its GradScaler does), instead of four kernels per gradient.
  std::vector<std::vector<at::Tensor>> on_gpu;
  for (auto& group : optimizer.param_groups()) {
    for (auto& param : group.params()) {
      const at::Tensor& grad = param.grad();
      if (!grad.defined()) continue;
      if (grad.is_cuda() && !grad.is_sparse()) {
        auto same = std::find_if(on_gpu.begin(), on_gpu.end(), [&](const std::vector<at::Tensor>& batch) {
          return batch.front().device() == grad.device() && batch.front().scalar_type() == grad.scalar_type();
        });
        if (same == on_gpu.end()) same = on_gpu.insert(on_gpu.end(), std::vector<at::Tensor>());
        same->push_back(grad);
        continue;
      }
      accumulate(at::isfinite(grad).all().logical_not());
      grad.mul_(inv_scale);
    }
  }
  for (auto& batch : on_gpu) {
    const auto on_device = at::TensorOptions(batch.front().device()).dtype(at::kFloat);
    at::Tensor found_here = at::zeros({1}, on_device);
    at::_amp_foreach_non_finite_check_and_unscale_(batch, found_here, at::full({1}, inv_scale, on_device));
    accumulate(found_here.reshape({}).gt(0));
  }
  const at::Device flag_device = comm_ ? comm_->device() : at::Device(at::kCPU);
  at::Tensor flag = found.defined() ? found.to(flag_device, at::kFloat).reshape({1})
                                    : at::zeros({1}, at::TensorOptions(flag_device).dtype(at::kFloat));
  if (comm_ && comm_->size() > 1) comm_->all_reduce(flag, dist::ReduceOp::Max);
  return flag.item<float>() != 0.0f;
}

void GradScaler::unscale_(torch::optim::Optimizer& optimizer) {
  if (!options_.enabled()) return;
  PerOptimizer& state = this_iteration_[&optimizer];
  DPT_CHECK(state.stage != Stage::Unscaled, ConfigError,
            "GradScaler::unscale_() was already called on this optimizer since the last update()");
  DPT_CHECK(state.stage != Stage::Stepped, ConfigError,
            "GradScaler::unscale_() was called after step(); call update() first");
  state.found_inf = any_non_finite_then_unscale(optimizer);
  state.stage = Stage::Unscaled;
}

bool GradScaler::step(torch::optim::Optimizer& optimizer) {
  if (!options_.enabled()) {
    optimizer.step();
    return true;
  }
  PerOptimizer& state = this_iteration_[&optimizer];
  DPT_CHECK(state.stage != Stage::Stepped, ConfigError,
            "GradScaler::step() was already called on this optimizer since the last update()");
  if (state.stage == Stage::Ready) unscale_(optimizer);
  state.stage = Stage::Stepped;
  if (state.found_inf) return false;
  optimizer.step();
  return true;
}

void GradScaler::update() {
  if (!options_.enabled()) return;
  DPT_CHECK(!this_iteration_.empty(), ConfigError,
            "GradScaler::update() found no unscale_() or step() since the last update()");
  bool found_inf = false;
  for (const auto& entry : this_iteration_) found_inf = found_inf || entry.second.found_inf;
  this_iteration_.clear();
  // The arithmetic of PyTorch's _amp_update_scale_, in float32.
  if (found_inf) {
    scale_ *= static_cast<float>(options_.backoff_factor());
    growth_tracker_ = 0;
    return;
  }
  if (++growth_tracker_ == options_.growth_interval()) {
    const float grown = scale_ * static_cast<float>(options_.growth_factor());
    if (std::isfinite(grown)) scale_ = grown;
    growth_tracker_ = 0;
  }
}

double GradScaler::get_scale() const { return options_.enabled() ? scale_ : 1.0; }

c10::impl::GenericDict GradScaler::state_dict() const {
  c10::impl::GenericDict state(c10::StringType::get(), c10::AnyType::get());
  if (!options_.enabled()) return state;
  state.insert("scale", static_cast<double>(scale_));
  state.insert("growth_factor", options_.growth_factor());
  state.insert("backoff_factor", options_.backoff_factor());
  state.insert("growth_interval", options_.growth_interval());
  state.insert("_growth_tracker", growth_tracker_);
  return state;
}

namespace {

c10::IValue entry(const c10::impl::GenericDict& state, const std::string& key,
                  bool integral) {
  auto found = state.find(key);
  DPT_CHECK(found != state.end(), CheckpointError, "the loss-scaler state has no '", key,
            "' entry; was it saved by a GradScaler?");
  const c10::IValue& value = found->value();
  DPT_CHECK(integral ? value.isInt() : (value.isDouble() || value.isInt()), CheckpointError,
            "the loss-scaler state entry '", key, "' should be ", integral ? "an int" : "a float",
            ", found ", value.tagKind());
  return value;
}

double as_double(const c10::IValue& value) {
  return value.isInt() ? static_cast<double>(value.toInt()) : value.toDouble();
}

}  // namespace

void GradScaler::load_state_dict(const c10::impl::GenericDict& state) {
  if (!options_.enabled()) return;
  DPT_CHECK(state.size() > 0, CheckpointError,
            "the loss-scaler state is empty, as saved by a disabled GradScaler; "
            "resume with mixed precision off, or start the scaler afresh");
  const double scale = as_double(entry(state, "scale", false));
  DPT_CHECK(scale > 0 && std::isfinite(scale), CheckpointError,
            "the loss-scaler state has an invalid scale ", scale);
  scale_ = static_cast<float>(scale);
  options_.growth_factor(as_double(entry(state, "growth_factor", false)));
  options_.backoff_factor(as_double(entry(state, "backoff_factor", false)));
  options_.growth_interval(entry(state, "growth_interval", true).toInt());
  growth_tracker_ = entry(state, "_growth_tracker", true).toInt();
  this_iteration_.clear();
}

}  // namespace dpt::train
