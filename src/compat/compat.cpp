#include "dptrain/compat/compat.h"

#include <ATen/Version.h>

#include <cmath>
#include <regex>

#if defined(DPTRAIN_WITH_NCCL)
#include <torch/csrc/distributed/c10d/ProcessGroupNCCL.hpp>
#endif
// PyTorch's fused SGD kernel (2.x; 1.13 has none).
#if __has_include(<ATen/ops/_fused_sgd.h>)
#define DPT_HAS_FUSED_SGD 1
#include <ATen/ops/_fused_sgd.h>
#endif

namespace dpt::compat {

std::string torch_version() { return TORCH_VERSION; }

TorchBuild torch_build_from(const std::string& show_config) {
  TorchBuild build;
  std::smatch match;
  if (std::regex_search(show_config, match, std::regex(R"(BLAS_INFO=([^,\s]+))"))) build.blas = match[1];
  // "Intel(R) MKL-DNN v2.6.3 (Git Hash ...)" in 1.13, "Intel(R) oneAPI Deep Neural Network
  // Library (oneDNN) v3.7.1 ..." later.
  if (std::regex_search(show_config, match, std::regex(R"(DNN[^\n]*? v(\d+\.\d+\.\d+))"))) build.onednn = match[1];
  return build;
}

TorchBuild torch_build() { return torch_build_from(at::show_config()); }

bool backend_reduces(Backend& backend, at::ScalarType type) {
  if (backend.getBackendName() != "gloo") return true;
  std::vector<at::Tensor> tensors{at::zeros({1}, at::TensorOptions().dtype(type))};
  try {
    backend.allreduce(tensors)->wait();
    return true;
  } catch (const c10::Error& e) {
    // Gloo's type switch, in every version; anything else (a peer gone) is the caller's failure.
    if (std::string(e.what()).find("Invalid scalar type") == std::string::npos) throw;
    return false;
  }
}

GroupOptions clone_group_options(const std::vector<torch::optim::OptimizerParamGroup>& groups) {
  GroupOptions options;
  for (const auto& group : groups) options.push_back(group.has_options() ? group.options().clone() : nullptr);
  return options;
}

void restore_group_options(torch::optim::Optimizer& optimizer, GroupOptions options) {
  auto& groups = optimizer.param_groups();
  TORCH_INTERNAL_ASSERT(groups.size() == options.size(), "restore_group_options: the optimizer has ", groups.size(),
                        " parameter groups, the options are of ", options.size());
  for (size_t g = 0; g < groups.size(); ++g) {
    if (options[g]) groups[g].set_options(std::move(options[g]));
  }
}

void shutdown_backend(Backend& backend) {
#if defined(DPTRAIN_WITH_NCCL) && DPT_TORCH_AT_LEAST(2, 2)
  if (auto* nccl = dynamic_cast<c10d::ProcessGroupNCCL*>(&backend)) {
    nccl->shutdown();
  }
#else
  (void)backend;
#endif
}

bool on_completion(const WorkPtr& work, std::function<void()> callback) {
  c10::intrusive_ptr<c10::ivalue::Future> future;
  try {
    future = work->getFuture();  // the base class throws: "not implemented"
  } catch (const c10::Error&) {
    return false;
  }
  if (!future) return false;
  future->addCallback([callback = std::move(callback)](c10::ivalue::Future&) { callback(); });
  return true;
}

#if defined(DPT_HAS_FUSED_SGD)
bool has_fused_sgd() { return true; }

void fused_sgd_unless_found_inf(at::TensorList params, at::TensorList grads, at::TensorList momentum_buffers,
                                const FusedSgdHyper& hyper, const at::Tensor& found_inf) {
  at::_fused_sgd_(params, grads, hyper.momentum != 0 ? momentum_buffers : at::TensorList(), hyper.weight_decay,
                  hyper.momentum, hyper.lr, hyper.dampening, hyper.nesterov, /*maximize=*/false,
                  /*is_first_step=*/false, /*grad_scale=*/c10::nullopt, found_inf);
}
#else
bool has_fused_sgd() { return false; }

void fused_sgd_unless_found_inf(at::TensorList, at::TensorList, at::TensorList, const FusedSgdHyper&,
                                const at::Tensor&) {
  TORCH_INTERNAL_ASSERT(false, "this LibTorch has no fused SGD kernel: ask has_fused_sgd() first");
}
#endif

void zero_grad(const std::vector<at::Tensor>& params) {
  for (const at::Tensor& p : params) {
    at::Tensor& grad = const_cast<at::Tensor&>(p).mutable_grad();
    if (!grad.defined()) continue;
#if TORCH_VERSION_MAJOR >= 2
    grad = at::Tensor();
#else
    grad.detach_();
    grad.zero_();
#endif
  }
}

namespace {

#if DPT_TORCH_AT_LEAST(2, 4)
bool autocast_enabled(at::DeviceType device) { return at::autocast::is_autocast_enabled(device); }
at::ScalarType autocast_dtype(at::DeviceType device) { return at::autocast::get_autocast_dtype(device); }
void set_autocast(at::DeviceType device, bool enabled, at::ScalarType dtype) {
  at::autocast::set_autocast_enabled(device, enabled);
  at::autocast::set_autocast_dtype(device, dtype);
}
#else
bool autocast_enabled(at::DeviceType device) {
  return device == at::kCPU ? at::autocast::is_cpu_enabled() : at::autocast::is_enabled();
}
at::ScalarType autocast_dtype(at::DeviceType device) {
  return device == at::kCPU ? at::autocast::get_autocast_cpu_dtype()
                            : at::autocast::get_autocast_gpu_dtype();
}
void set_autocast(at::DeviceType device, bool enabled, at::ScalarType dtype) {
  if (device == at::kCPU) {
    at::autocast::set_cpu_enabled(enabled);
    at::autocast::set_autocast_cpu_dtype(dtype);
  } else {
    at::autocast::set_enabled(enabled);
    at::autocast::set_autocast_gpu_dtype(dtype);
  }
}
#endif

}  // namespace

std::optional<double> elapsed_ms(const c10::Event& start, const c10::Event& end) {
#if DPT_TORCH_AT_LEAST(2, 6)
  return start.elapsedTime(end);
#else
  (void)start;
  (void)end;
  return std::nullopt;
#endif
}

AutocastGuard::AutocastGuard(at::DeviceType device, at::ScalarType dtype, bool enabled)
    : device_(device), previous_enabled_(autocast_enabled(device)), previous_dtype_(autocast_dtype(device)) {
  set_autocast(device, enabled, dtype);
  at::autocast::increment_nesting();
}

AutocastGuard::~AutocastGuard() {
  // Casts are cached while autocast is active; the outermost guard drops them, as
  // torch.autocast's __exit__ does, so no stale half-precision copies of weights survive.
  if (at::autocast::decrement_nesting() == 0) {
    at::autocast::clear_cache();
  }
  set_autocast(device_, previous_enabled_, previous_dtype_);
}

at::Tensor scaled_dot_product_attention(const at::Tensor& q, const at::Tensor& k, const at::Tensor& v,
                                        double dropout_p) {
#if TORCH_VERSION_MAJOR >= 2
  return at::scaled_dot_product_attention(q, k, v, /*attn_mask=*/{}, dropout_p);
#else
  const double scale = 1.0 / std::sqrt(static_cast<double>(q.size(-1)));
  auto weights = at::softmax(at::matmul(q * scale, k.transpose(-2, -1)), -1);
  if (dropout_p > 0) weights = at::dropout(weights, dropout_p, /*train=*/true);
  return at::matmul(weights, v);
#endif
}

at::Tensor norm_along(const at::Tensor& t, int64_t dim) {
#if TORCH_VERSION_MAJOR >= 2
  return at::linalg_vector_norm(t, 2, at::IntArrayRef{dim}, /*keepdim=*/true);
#else
  return at::frobenius_norm(t, at::IntArrayRef{dim}, /*keepdim=*/true);
#endif
}

}  // namespace dpt::compat
