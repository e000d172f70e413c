#include "dptrain/optim/fused_sgd.h"

#include <algorithm>
#include <vector>

#include <ATen/Functions.h>
#include <ATen/Parallel.h>
#include <torch/autograd.h>

#include "dptrain/compat/compat.h"
#include "sgd_kernel.h"

namespace dpt::optim {

namespace {

// Elements per task when the update is split over LibTorch's intra-op threads (its own grain
// for elementwise kernels).
constexpr int64_t kGrain = 32768;

// Whether `t` addresses its elements as `param` does: the same sizes and, in every dimension of
// more than one element, the same stride (a dimension of one element can carry any stride). cuDNN
// gives a 1x1 convolution's weight, strided (C, 1, 1, 1), a gradient strided (C, 1, C, C): the
// same memory, which PyTorch's multi-tensor kernels refuse (they compare strides whole).
bool same_element_order(const at::Tensor& t, const at::Tensor& param) {
  if (t.sizes() != param.sizes()) return false;
  for (int64_t d = 0; d < t.dim(); ++d) {
    if (t.size(d) != 1 && t.stride(d) != param.stride(d)) return false;
  }
  return true;
}

// Whether the parameter, its gradient and its buffer (if any) share one dense layout on one device
// in one type: what a kernel that walks them as flat arrays needs (contiguous or channels_last
// alike: the update is elementwise). `exact_strides`: strides equal whole, not only where they
// address elements (SGD's own momentum buffer then has the strides the flat loop's would have).
bool one_dense_layout(const at::Tensor& param, const at::Tensor& grad, const at::Tensor* buffer, bool exact_strides) {
  const auto alike = [&](const at::Tensor& t) {
    const bool same_layout = exact_strides ? t.sizes() == param.sizes() && t.strides() == param.strides()
                                           : same_element_order(t, param);
    return t.device() == param.device() && t.scalar_type() == param.scalar_type() && !t.is_sparse() && same_layout;
  };
  return !param.is_sparse() && param.is_non_overlapping_and_dense() && alike(grad) &&
         (buffer == nullptr || alike(*buffer));
}

// Whether one flat loop covers the tensors: float32 on the CPU, in one dense layout.
bool flat_alike(const at::Tensor& param, const at::Tensor& grad, const at::Tensor* buffer) {
  return param.device().is_cpu() && param.scalar_type() == at::kFloat &&
         one_dense_layout(param, grad, buffer, /*exact_strides=*/true);
}

// SGD's own update of one parameter (LibTorch's four steps), for what the loop does not cover.
void update_unfused(const at::Tensor& param, at::Tensor d_p, torch::optim::SGDParamState* state,
                    const torch::optim::SGDOptions& options, at::Tensor* new_buffer) {
  if (options.weight_decay() != 0) d_p = d_p.add(param, options.weight_decay());
  if (options.momentum() != 0) {
    at::Tensor buffer;
    if (state == nullptr) {
      buffer = torch::clone(d_p).detach();
      *new_buffer = buffer;
    } else {
      buffer = state->momentum_buffer();
      buffer.mul_(options.momentum()).add_(d_p, 1 - options.dampening());
    }
    d_p = options.nesterov() ? d_p.add(buffer, options.momentum()) : buffer;
  }
  param.add_(d_p, -1 * options.lr());
}

// `t` viewed with `param`'s strides where that changes no element's address, else `t` itself.
at::Tensor strided_as(const at::Tensor& t, const at::Tensor& param) {
  if (t.strides() == param.strides() || !same_element_order(t, param)) return t;
  return t.as_strided(param.sizes(), param.strides(), t.storage_offset());
}

// Parameters off the CPU, whose gradients and momentum buffers exist: updated a group at a time.
struct ForeachBatch {
  std::vector<at::Tensor> params, grads, buffers;

  // Gradients and buffers go in with their parameter's strides where their memory allows, so that
  // the multi-tensor kernels take them in one launch.
  void add(const at::Tensor& param, const at::Tensor& grad, const at::Tensor* buffer) {
    params.push_back(param);
    grads.push_back(strided_as(grad, param));
    if (buffer != nullptr) buffers.push_back(strided_as(*buffer, param));
  }
};

// LibTorch's four steps, each one multi-tensor kernel over the batch (at::_foreach_*) instead of
// a kernel per parameter: on a GPU, ResNet-50's 161 parameters took some 800 launches a step.
// The arithmetic per element is SGD's.
void update_foreach(const ForeachBatch& batch, const torch::optim::SGDOptions& options) {
  std::vector<at::Tensor> d_p =
      options.weight_decay() != 0 ? at::_foreach_add(batch.grads, batch.params, options.weight_decay()) : batch.grads;
  if (options.momentum() != 0) {
    at::_foreach_mul_(batch.buffers, options.momentum());
    at::_foreach_add_(batch.buffers, d_p, 1 - options.dampening());
    d_p = options.nesterov() ? at::_foreach_add(d_p, batch.buffers, options.momentum()) : batch.buffers;
  }
  at::_foreach_add_(batch.params, d_p, -1 * options.lr());
}

// A parameter PyTorch's fused kernel covers: on a GPU, in one dense layout with its gradient and
// its momentum buffer, which must exist (`buffer` null: no momentum); ForeachBatch::add gives them
// the parameter's strides.
bool fused_kernel_covers(const at::Tensor& param, const at::Tensor& grad, const at::Tensor* buffer) {
  return param.is_cuda() && (buffer == nullptr || buffer->defined()) &&
         one_dense_layout(param, grad, buffer, /*exact_strides=*/false);
}

}  // namespace

bool FusedSGD::step_unless_found_inf(const at::Tensor& found_inf) {
  if (!compat::has_fused_sgd()) return false;
  torch::NoGradGuard no_grad;
  struct Batch {
    const torch::optim::SGDOptions* options;
    ForeachBatch tensors;
  };
  // One batch per group, device and type (the kernel takes one of each); all checked before any
  // is stepped, so that a refusal changes nothing.
  std::vector<Batch> batches;
  for (auto& group : param_groups()) {
    const auto& options = static_cast<const torch::optim::SGDOptions&>(group.options());
    const bool with_buffer = options.momentum() != 0;
    const size_t first_of_group = batches.size();
    for (auto& param : group.params()) {
      if (!param.grad().defined()) continue;
      const at::Tensor p = param.data(), grad = param.grad().data();
      at::Tensor buffer;
      if (with_buffer) {
        auto found = state().find(compat::optimizer_state_key<std::decay_t<decltype(state())>>(param));
        if (found != state().end()) buffer = static_cast<torch::optim::SGDParamState&>(*found->second).momentum_buffer();
      }
      if (!fused_kernel_covers(p, grad, with_buffer ? &buffer : nullptr)) return false;
      auto same = std::find_if(batches.begin() + first_of_group, batches.end(), [&](const Batch& batch) {
        const at::Tensor& other = batch.tensors.params.front();
        return other.device() == p.device() && other.scalar_type() == p.scalar_type();
      });
      if (same == batches.end()) same = batches.insert(batches.end(), Batch{&options, {}});
      same->tensors.add(p, grad, with_buffer ? &buffer : nullptr);
    }
  }
  for (const Batch& batch : batches) {
    const auto& o = *batch.options;
    const compat::FusedSgdHyper hyper{o.lr(), o.momentum(), o.dampening(), o.weight_decay(), o.nesterov()};
    const at::Tensor flag = found_inf.to(batch.tensors.params.front().device(), at::kFloat).reshape({1});
    compat::fused_sgd_unless_found_inf(batch.tensors.params, batch.tensors.grads, batch.tensors.buffers, hyper, flag);
  }
  return true;
}

torch::Tensor FusedSGD::step(LossClosure closure) {
  torch::NoGradGuard no_grad;
  torch::Tensor loss;
  if (closure != nullptr) {
    at::AutoGradMode enable_grad(true);
    loss = closure();
  }
  const bool fused = sgd_update_fused_available();
  for (auto& group : param_groups()) {
    const auto& options = static_cast<const torch::optim::SGDOptions&>(group.options());
    ForeachBatch off_cpu;
    for (auto& param : group.params()) {
      if (!param.grad().defined()) continue;
      const at::Tensor p = param.data(), grad = param.grad().data();
      const auto key = compat::optimizer_state_key<std::decay_t<decltype(state())>>(param);
      auto found = state().find(key);
      auto* param_state =
          found == state().end() ? nullptr : static_cast<torch::optim::SGDParamState*>(found->second.get());
      const bool with_buffer = options.momentum() != 0;
      const at::Tensor buffer = param_state != nullptr ? param_state->momentum_buffer() : at::Tensor();
      if (!p.device().is_cpu() && !grad.is_sparse() && (!with_buffer || buffer.defined())) {
        off_cpu.add(p, grad, with_buffer ? &buffer : nullptr);
        continue;
      }
      at::Tensor new_buffer;
      if (fused && flat_alike(p, grad, buffer.defined() ? &buffer : nullptr)) {
        if (with_buffer && !buffer.defined()) new_buffer = at::empty_like(p);
        const at::Tensor& written = buffer.defined() ? buffer : new_buffer;
        const SgdElementwise elementwise{static_cast<float>(options.lr()), static_cast<float>(options.weight_decay()),
                                         static_cast<float>(options.momentum()),
                                         static_cast<float>(1 - options.dampening()), options.nesterov(),
                                         /*first=*/!buffer.defined()};
        float* p_data = p.data_ptr<float>();
        const float* g_data = grad.data_ptr<float>();
        float* b_data = with_buffer ? written.data_ptr<float>() : nullptr;
        at::parallel_for(0, p.numel(), kGrain, [&](int64_t begin, int64_t end) {
          sgd_update_fused(p_data + begin, g_data + begin, b_data == nullptr ? nullptr : b_data + begin, end - begin,
                           elementwise);
        });
      } else {
        update_unfused(p, grad, param_state, options, &new_buffer);
      }
      if (new_buffer.defined()) {
        auto created = std::make_unique<torch::optim::SGDParamState>();
        created->momentum_buffer(new_buffer);
        state()[key] = std::move(created);
      }
    }
    if (!off_cpu.params.empty()) update_foreach(off_cpu, options);
  }
  return loss;
}

}  // namespace dpt::optim
