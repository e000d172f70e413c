#include "dptrain/optim/grad_scaler.h"

#include <algorithm>
#include <cmath>
#include <vector>

#include <ATen/Functions.h>

#include <torch/utils.h>

#include "dptrain/common/error.h"
#include "dptrain/optim/fused_sgd.h"

namespace dpt::optim {

GradScaler::GradScaler(GradScalerOptions options, std::shared_ptr<dist::Communicator> comm)
    : options_(std::move(options)),
      comm_(std::move(comm)),
      scale_(at::full({1}, static_cast<float>(options_.init_scale()), at::kFloat)),
      growth_tracker_(at::zeros({1}, at::kInt)) {
  DPT_CHECK(options_.init_scale() > 0 && std::isfinite(static_cast<float>(options_.init_scale())), ConfigError,
            "the initial loss scale must be positive and finite in float32, got ", options_.init_scale());
  DPT_CHECK(options_.growth_factor() > 1.0, ConfigError,
            "the loss-scale growth factor must be above 1, got ", options_.growth_factor());
  DPT_CHECK(options_.backoff_factor() > 0 && options_.backoff_factor() < 1.0, ConfigError,
            "the loss-scale backoff factor must lie strictly between 0 and 1, got ",
            options_.backoff_factor());
  DPT_CHECK(options_.growth_interval() > 0, ConfigError,
            "the loss-scale growth interval must be positive, got ", options_.growth_interval());
}

void GradScaler::keep_on(const at::Device& device) {
  if (scale_.device() == device) return;
  scale_ = scale_.to(device);
  growth_tracker_ = growth_tracker_.to(device);
}

at::Tensor GradScaler::scale(const at::Tensor& loss) {
  if (!options_.enabled()) return loss;
  keep_on(loss.device());
  return loss * scale_.reshape({});
}

at::Tensor GradScaler::any_non_finite_then_unscale(torch::optim::Optimizer& optimizer) const {
  torch::NoGradGuard no_grad;
  // PyTorch computes the reciprocal in double and rounds it to float32 once; for the usual
  // power-of-two scales this makes unscaling exact.
  const at::Tensor inv_scale = scale_.to(at::kDouble).reciprocal().to(at::kFloat);
  // One flag accumulated beside the scale: nothing read back per gradient.
  at::Tensor found = at::zeros({1}, scale_.options());
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
      found.logical_or_(at::isfinite(grad).all().logical_not().to(found.device()));
      grad.mul_(inv_scale.to(grad.device()));
    }
  }
  for (auto& batch : on_gpu) {
    const at::Device device = batch.front().device();
    // The kernel only ever sets its flag: where it is the scale's device, it sets `found` itself.
    at::Tensor found_here = device == found.device() ? found : at::zeros({1}, found.options().device(device));
    at::_amp_foreach_non_finite_check_and_unscale_(batch, found_here, inv_scale.to(device));
    if (!found_here.is_same(found)) found.logical_or_(found_here.to(found.device()));
  }
  if (comm_ && comm_->size() > 1) {
    at::Tensor agreed = found.to(comm_->device());
    comm_->all_reduce(agreed, dist::ReduceOp::Max);
    found = agreed.to(found.device());
  }
  return found;
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

void GradScaler::step(torch::optim::Optimizer& optimizer) {
  if (!options_.enabled()) {
    optimizer.step();
    return;
  }
  PerOptimizer& state = this_iteration_[&optimizer];
  DPT_CHECK(state.stage != Stage::Stepped, ConfigError,
            "GradScaler::step() was already called on this optimizer since the last update()");
  if (state.stage == Stage::Ready) unscale_(optimizer);
  state.stage = Stage::Stepped;
  last_found_inf_ = state.found_inf;
  if (state.found_inf.is_cuda()) {
    auto* fused = dynamic_cast<FusedSGD*>(&optimizer);
    if (fused != nullptr && fused->step_unless_found_inf(state.found_inf)) return;
  }
  if (state.found_inf.item<float>() == 0.0f) optimizer.step();
}

bool GradScaler::skipped() const {
  return options_.enabled() && last_found_inf_.defined() && last_found_inf_.item<float>() != 0.0f;
}

void GradScaler::update() {
  if (!options_.enabled()) return;
  DPT_CHECK(!this_iteration_.empty(), ConfigError,
            "GradScaler::update() found no unscale_() or step() since the last update()");
  at::Tensor found_inf = at::zeros({1}, scale_.options());
  for (const auto& entry : this_iteration_) found_inf.logical_or_(entry.second.found_inf.to(scale_.device()));
  this_iteration_.clear();
  if (scale_.is_cuda()) {
    at::_amp_update_scale_(scale_, growth_tracker_, found_inf, options_.growth_factor(), options_.backoff_factor(),
                           options_.growth_interval());
    return;
  }
  // The arithmetic of PyTorch's _amp_update_scale_, in float32 (LibTorch 1.13 has it only on GPUs).
  float scale = scale_.item<float>();
  int64_t tracker = growth_tracker_.item<int32_t>();
  if (found_inf.item<float>() != 0.0f) {
    scale *= static_cast<float>(options_.backoff_factor());
    tracker = 0;
  } else if (++tracker == options_.growth_interval()) {
    const float grown = scale * static_cast<float>(options_.growth_factor());
    if (std::isfinite(grown)) scale = grown;
    tracker = 0;
  }
  scale_.fill_(scale);
  growth_tracker_.fill_(tracker);
}

double GradScaler::get_scale() const { return options_.enabled() ? scale_.item<float>() : 1.0; }

int64_t GradScaler::growth_tracker() const { return growth_tracker_.item<int32_t>(); }

c10::impl::GenericDict GradScaler::state_dict() const {
  c10::impl::GenericDict state(c10::StringType::get(), c10::AnyType::get());
  if (!options_.enabled()) return state;
  state.insert("scale", get_scale());
  state.insert("growth_factor", options_.growth_factor());
  state.insert("backoff_factor", options_.backoff_factor());
  state.insert("growth_interval", options_.growth_interval());
  state.insert("_growth_tracker", growth_tracker());
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
  scale_.fill_(static_cast<float>(scale));
  options_.growth_factor(as_double(entry(state, "growth_factor", false)));
  options_.backoff_factor(as_double(entry(state, "backoff_factor", false)));
  options_.growth_interval(entry(state, "growth_interval", true).toInt());
  growth_tracker_.fill_(entry(state, "_growth_tracker", true).toInt());
  this_iteration_.clear();
}

}  // namespace dpt::optim
