#pragma once
// The one place that knows LibTorch versions. Everything else in dptrain is written against the
// names below and never tests TORCH_VERSION itself.
//
// Supported: Debian's LibTorch 1.13 (CPU, Gloo) and LibTorch 2.x (CPU or CUDA, Gloo and NCCL).
//
//   dpt::compat::BackendPtr backend = ...;                // c10d::ProcessGroup in 1.x, c10d::Backend in 2.x
//   if (!dpt::compat::backend_supports_avg(*backend)) { /* sum, then divide */ }
//   { dpt::compat::AutocastGuard autocast(at::kCPU, at::kBFloat16); ... }

#include <torch/version.h>

#include <ATen/ATen.h>
#include <ATen/autocast_mode.h>
#include <c10/core/Event.h>
#include <torch/csrc/distributed/c10d/ProcessGroup.hpp>
#include <torch/csrc/distributed/c10d/Store.hpp>
#include <torch/csrc/distributed/c10d/Work.hpp>
#include <torch/optim/optimizer.h>

#include <functional>
#include <memory>
#include <optional>
#include <sstream>
#include <string>
#include <type_traits>
#include <vector>

#if TORCH_VERSION_MAJOR >= 2
#include <torch/csrc/distributed/c10d/Backend.hpp>
#endif

#define DPT_TORCH_AT_LEAST(major, minor) \
  (TORCH_VERSION_MAJOR > (major) || (TORCH_VERSION_MAJOR == (major) && TORCH_VERSION_MINOR >= (minor)))

namespace dpt::compat {

// The c10d class that concrete backends (ProcessGroupGloo, ProcessGroupNCCL) derive from.
#if TORCH_VERSION_MAJOR >= 2
using Backend = c10d::Backend;
#else
using Backend = c10d::ProcessGroup;
#endif
using BackendPtr = c10::intrusive_ptr<Backend>;
using WorkPtr = c10::intrusive_ptr<c10d::Work>;
using StorePtr = c10::intrusive_ptr<c10d::Store>;

// "1.13.0": the LibTorch this build of dptrain was compiled against.
std::string torch_version();

// What LibTorch reports it was built with (at::show_config()): its BLAS, "generic" in Debian's
// build, which loads libblas.so.3, "mkl" in PyTorch's wheels, which link MKL and oneDNN into
// libtorch_cpu where no library of theirs shows in the process's maps; and its oneDNN's version
// ("2.6.3"). Empty where the report names none.
struct TorchBuild {
  std::string blas;
  std::string onednn;
};
TorchBuild torch_build();
TorchBuild torch_build_from(const std::string& show_config);

// Gloo has no ReduceOp::AVG in any version; NCCL has it natively.
inline bool backend_supports_avg(const Backend& backend) {
  return backend.getBackendName() == "nccl";
}

// Whether `backend` reduces and broadcasts tensors of `type` itself; where not, callers go through
// float32. Gloo takes bfloat16 from LibTorch 2.3 only, and neither bfloat16 nor half where LibTorch
// links a Gloo built without torch's types (Debian's 2.14 links its system Gloo, which cannot know
// them: "Invalid scalar type"). No version tells the last, so Gloo is asked: a one-element
// all_reduce of `type` on `backend`, which a missing type fails before anything is sent. That is
// a collective: every rank of the group asks, at the same point.
bool backend_reduces(Backend& backend, at::ScalarType type);

// Gloo offers no reduce_scatter; callers fall back to allreduce and keep their slice.
inline bool backend_supports_reduce_scatter(const Backend& backend) {
  return backend.getBackendName() == "nccl";
}

// Releases a backend's communicators before process exit. NCCL in 2.2+ wants an explicit shutdown
// (otherwise it warns, and can hang in its destructor when a peer died); others need nothing.
void shutdown_backend(Backend& backend);

// Runs `callback` on the backend's thread when `work` completes (at once if it has), where the
// work reports completion through its future (Gloo's work, dptrain's shared-memory work); returns
// false, and never calls it, where it offers no future.
bool on_completion(const WorkPtr& work, std::function<void()> callback);

// Milliseconds between two completed events of one device that were created with timing on
// (c10::EventFlag::BACKEND_DEFAULT); nullopt where LibTorch cannot time c10 events (before 2.6).
std::optional<double> elapsed_ms(const c10::Event& start, const c10::Event& end);

// Autocast on or off for one device type, for the guard's lifetime, restoring what was there.
// LibTorch renamed these switches in 2.4 (per-device setters instead of cpu/gpu pairs).
class AutocastGuard {
 public:
  AutocastGuard(at::DeviceType device, at::ScalarType dtype, bool enabled = true);
  ~AutocastGuard();
  AutocastGuard(const AutocastGuard&) = delete;
  AutocastGuard& operator=(const AutocastGuard&) = delete;

 private:
  at::DeviceType device_;
  bool previous_enabled_;
  at::ScalarType previous_dtype_;
};

// The key LibTorch's optimizers use for a parameter in `optimizer.state()`: a string of the
// TensorImpl address in 1.x, the TensorImpl pointer itself in 2.x. Derived from the map's own
// key type, so it follows whatever the installed LibTorch declares.
template <typename StateMap>
typename StateMap::key_type optimizer_state_key(const at::Tensor& param) {
  using Key = typename StateMap::key_type;
  if constexpr (std::is_same_v<Key, std::string>) {
    // What 1.x's c10::guts::to_string wrote (2.x removed it): the pointer through an ostream.
    std::ostringstream key;
    key << param.unsafeGetTensorImpl();
    return key.str();
  } else {
    return static_cast<Key>(param.unsafeGetTensorImpl());
  }
}

// SGD's hyper-parameters as the fused kernel takes them (torch::optim::SGDOptions' fields).
struct FusedSgdHyper {
  double lr, momentum, dampening, weight_decay;
  bool nesterov;
};

// Clones of each parameter group's options (null where a group has none), taken before an
// optimizer is built from the groups, for restore_group_options once it is. Newer LibTorch (2.14
// here; pytorch/pytorch#161825) merges every group's options with the optimizer's defaults and
// takes a field that equals its options class's constructor default as unset: a group's weight
// decay of 0 under SGD or RMSprop defaults of 1e-4 became 1e-4, on the norm and bias parameters
// torchvision's recipes exempt. Restored, every group keeps the options it was given, in every
// version.
using GroupOptions = std::vector<std::unique_ptr<torch::optim::OptimizerOptions>>;
GroupOptions clone_group_options(const std::vector<torch::optim::OptimizerParamGroup>& groups);
void restore_group_options(torch::optim::Optimizer& optimizer, GroupOptions options);

// An optimizer of class Optim over `groups`, each keeping the options it is given (above).
template <typename Optim, typename Defaults>
std::shared_ptr<Optim> optimizer_over(std::vector<torch::optim::OptimizerParamGroup> groups, const Defaults& defaults) {
  auto given = clone_group_options(groups);
  auto optimizer = std::make_shared<Optim>(std::move(groups), defaults);
  restore_group_options(*optimizer, std::move(given));
  return optimizer;
}

// What torch::optim::Optimizer::zero_grad() does to `params` in this LibTorch: 1.x zeroes each
// gradient (detached first), 2.x unsets it (set_to_none). For clearing gradients without an
// optimizer over them (ZeRO-2's steps parts of the parameters).
void zero_grad(const std::vector<at::Tensor>& params);

// Whether this LibTorch has PyTorch's fused SGD kernel (2.x; 1.13 has none).
bool has_fused_sgd();

// SGD's step over parameters of one type on one GPU as PyTorch's fused kernel (at::_fused_sgd_:
// one launch for the whole update, what torch.optim.SGD(fused=True) runs), which leaves every
// tensor untouched when `found_inf` (one float on that GPU) holds 1: nothing on the host waits for
// the flag. Every momentum buffer must exist (the kernel's own first step would leave them
// unwritten when it skips). Only where has_fused_sgd().
void fused_sgd_unless_found_inf(at::TensorList params, at::TensorList grads, at::TensorList momentum_buffers,
                                const FusedSgdHyper& hyper, const at::Tensor& found_inf);

// softmax(q k^T / sqrt(d)) v over the last two dimensions of [..., L, d] tensors, with dropout on
// the attention weights when `dropout_p` > 0. LibTorch 2.x has a fused kernel
// (at::scaled_dot_product_attention, which PyTorch's MultiheadAttention uses there); 1.13 computes
// it as PyTorch 1.13's MultiheadAttention did (q scaled first).
at::Tensor scaled_dot_product_attention(const at::Tensor& q, const at::Tensor& k, const at::Tensor& v,
                                        double dropout_p);

// torch.norm(t, dim=dim, keepdim=True), the 2-norm along `dim`, by the kernel Python's torch.norm
// reaches in this LibTorch (1.13: frobenius_norm; 2.x: linalg.vector_norm), so that the sums'
// rounding is PyTorch's (PowerSGD's orthogonalization divides by it).
at::Tensor norm_along(const at::Tensor& t, int64_t dim);

}  // namespace dpt::compat
