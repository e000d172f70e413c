#include "dptrain/parallel/data_parallel.h"

#include <algorithm>
#include <atomic>

#include <ATen/Parallel.h>
#include <c10/core/DeviceGuard.h>
#include <torch/csrc/autograd/autograd.h>
#include <torch/csrc/autograd/engine.h>
#include <torch/csrc/autograd/function.h>

#include "dptrain/common/error.h"
#include "dptrain/compat/autograd_node.h"
#include "dptrain/dist/cuda_device.h"
#include "dptrain/parallel/replicas.h"
#include "replica_threads.h"

namespace dpt {

namespace {

std::vector<int64_t> offsets_of(const std::vector<int64_t>& sizes) {
  std::vector<int64_t> offsets(sizes.size(), 0);
  for (size_t k = 1; k < sizes.size(); ++k) offsets[k] = offsets[k - 1] + sizes[k - 1];
  return offsets;
}

// The device a replica's thread makes current for its work; CPU replicas need none.
c10::optional<torch::Device> current_device_for(torch::Device device) {
  return device.is_cpu() ? c10::nullopt : c10::optional<torch::Device>(device);
}

// The primary's .grad += replica k's .grad for k = 1, 2, ... (the order PyTorch's reduce-add
// uses); each replica's .grad is then dropped, so its next backward starts from nothing.
void reduce_into_primary(std::vector<std::vector<at::Tensor>>& parameters, size_t used) {
  torch::NoGradGuard no_grad;
  std::vector<at::Tensor>& primary = parameters[0];
  for (size_t i = 0; i < primary.size(); ++i) {
    for (size_t k = 1; k < used; ++k) {
      at::Tensor& replica_grad = parameters[k][i].mutable_grad();
      if (!replica_grad.defined()) continue;
      at::Tensor& grad = primary[i].mutable_grad();
      at::Tensor moved = replica_grad.to(primary[i].device());
      replica_grad = at::Tensor();
      if (grad.defined()) {
        grad.add_(moved);
      } else {
        grad = std::move(moved);
      }
    }
  }
}

// The backward of the gather. It receives the gradient of the whole gathered output and hands
// each replica its piece, then the replicas' gradients are added into the primary's.
//
// How the replicas' backward passes run in parallel depends on the device. LibTorch's autograd
// engine runs CPU work on the thread that called backward, so with CPU replicas this node runs
// each replica's backward itself, in that replica's thread (a backward of its own, from a thread
// that is not one of the engine's), and has no next edges. CUDA work, in contrast, runs on the
// engine's thread for its device, and this node itself runs on the output device's thread: a
// backward started from another thread and waited for here would queue work behind this very
// node and never finish. So with CUDA replicas the pieces are simply returned along edges to the
// replicas' outputs, each device's thread runs its replica's part, and the sum into the primary
// runs as a callback at the end of the whole backward, as DDP's reducer finishes its work.
class GatherBackward : public torch::autograd::Node {
 public:
  GatherBackward(std::vector<at::Tensor> outputs, std::vector<int64_t> sizes, int64_t dim,
                 std::vector<torch::Device> devices, std::vector<std::vector<at::Tensor>> parameters,
                 std::shared_ptr<detail::ReplicaThreads> threads, std::shared_ptr<std::atomic<int>> pending)
      : threads_on_cpu_(devices.at(0).is_cpu()),
        sizes_(std::move(sizes)),
        dim_(dim),
        devices_(std::move(devices)),
        parameters_(std::move(parameters)),
        threads_(std::move(threads)),
        pending_(std::move(pending)) {
    if (threads_on_cpu_) {
      outputs_ = std::move(outputs);
    } else {
      for (const auto& output : outputs) add_next_edge(torch::autograd::impl::gradient_edge(output));
    }
    ++*pending_;
  }
  ~GatherBackward() override { release(); }

  std::string name() const override { return "dpt::DataParallelGatherBackward"; }

  torch::autograd::variable_list apply(torch::autograd::variable_list&& grads) override {
    DPT_CHECK(!released_, ConfigError,
              "DataParallel: backward reached the same output a second time; each replica's graph is freed by "
              "the first backward (retain_graph is not supported). Run forward again");
    release();
    const at::Tensor grad = grads.at(0);
    const auto offsets = offsets_of(sizes_);
    const auto piece = [&](size_t k) { return grad.narrow(dim_, offsets[k], sizes_[k]).to(devices_[k]); };
    if (!threads_on_cpu_) {
      torch::autograd::variable_list pieces;
      for (size_t k = 0; k < sizes_.size(); ++k) pieces.push_back(grad.defined() ? piece(k) : at::Tensor());
      torch::autograd::Engine::get_default_engine().queue_callback(
          [parameters = parameters_, used = sizes_.size()]() mutable { reduce_into_primary(parameters, used); });
      return pieces;
    }
    std::vector<at::Tensor> outputs = std::move(outputs_);
    outputs_.clear();
    if (!grad.defined()) return {};
    threads_->run(outputs.size(), [&](size_t k) {
      if (outputs[k].requires_grad()) torch::autograd::backward({outputs[k]}, {piece(k)});
    });
    reduce_into_primary(parameters_, outputs.size());
    return {};
  }

 private:
  // This output no longer holds the replicas' tensors for a backward (done, or never to come).
  void release() {
    if (!released_) --*pending_;
    released_ = true;
  }

  bool threads_on_cpu_;  // CPU replicas: the backward passes run in the replica threads
  std::vector<at::Tensor> outputs_;  // CPU replicas only; CUDA replicas are reached by next edges
  std::vector<int64_t> sizes_;
  int64_t dim_;
  std::vector<torch::Device> devices_;
  std::vector<std::vector<at::Tensor>> parameters_;
  std::shared_ptr<detail::ReplicaThreads> threads_;
  std::shared_ptr<std::atomic<int>> pending_;  // outputs of this DataParallel awaiting backward
  bool released_ = false;
};

}  // namespace

std::vector<torch::Device> cpu_devices(int replicas) {
  DPT_CHECK(replicas >= 1, ConfigError, "DataParallel: the number of CPU replicas must be at least 1, got ", replicas);
  return std::vector<torch::Device>(static_cast<size_t>(replicas), torch::Device(torch::kCPU));
}

std::vector<torch::Device> cuda_devices(const std::vector<int>& gpus) {
  DPT_CHECK(!gpus.empty(), ConfigError, "DataParallel: no GPU listed; give at least one index, e.g. --gpus 0,1");
#if !defined(DPTRAIN_WITH_CUDA)
  std::string listed;
  for (int gpu : gpus) listed += (listed.empty() ? "" : ",") + std::to_string(gpu);
  throw ConfigError(str("DataParallel: GPUs ", listed, " requested but this build of dptrain is CPU-only; "
                        "build it against a CUDA LibTorch, or use CPU replicas"));
#else
  std::vector<torch::Device> devices;
  for (int gpu : gpus) devices.push_back(dist::cuda_device(gpu, "DataParallel: --gpus"));
  return devices;
#endif
}

std::vector<int64_t> scatter_sizes(int64_t n, int64_t k) {
  DPT_CHECK(n >= 1, ConfigError, "DataParallel: cannot scatter an empty batch (", n, " rows)");
  DPT_CHECK(k >= 1, ConfigError, "DataParallel: needs at least one replica, got ", k);
  const int64_t chunk = (n + k - 1) / k;
  std::vector<int64_t> sizes;
  for (int64_t start = 0; start < n; start += chunk) sizes.push_back(std::min(chunk, n - start));
  return sizes;
}

void DataParallelBase::check_devices(const DataParallelOptions& options) {
  const auto& devices = options.devices();
  DPT_CHECK(!devices.empty(), ConfigError, "DataParallel: no devices given; list at least one");
  for (const auto& device : devices) {
    DPT_CHECK(device.type() == devices[0].type(), ConfigError, "DataParallel: devices ", devices[0], " and ", device,
              " are of different kinds; give only CPU replicas or only CUDA devices");
  }
}

std::shared_ptr<torch::nn::Module> DataParallelBase::clone_module(const torch::nn::Module& module,
                                                                  torch::Device device) {
  try {
    return module.clone(device);
  } catch (const c10::Error& e) {
    throw ConfigError(str("DataParallel: cannot copy the model '", module.name(), "' to ", device,
                          ": DataParallel needs a Cloneable module (derive it from torch::nn::Cloneable). ",
                          e.what_without_backtrace()));
  }
}

DataParallelBase::DataParallelBase(std::vector<std::shared_ptr<torch::nn::Module>> modules,
                                   DataParallelOptions options)
    : modules_(std::move(modules)), options_(std::move(options)) {
  check_devices(options_);
  DPT_ASSERT(modules_.size() == options_.devices().size(), modules_.size(), " replicas for ",
             options_.devices().size(), " devices");
  if (!options_.output_device()) options_.output_device(options_.devices()[0]);
  DPT_CHECK(options_.dim() >= 0, ConfigError, "DataParallel: dim must not be negative, got ", options_.dim());
  const auto reference = describe_module(*modules_[0]);
  for (size_t k = 0; k < modules_.size(); ++k) {
    DPT_ASSERT(k == 0 || describe_module(*modules_[k]) == reference, "replica ", k, " of '", modules_[0]->name(),
               "' differs from the primary after clone()");
    std::vector<at::Tensor> tensors = modules_[k]->parameters();
    num_parameters_ = tensors.size();
    for (auto& b : modules_[k]->buffers()) tensors.push_back(b);
    tensors_.push_back(std::move(tensors));
  }

  const bool on_cpu = options_.devices()[0].is_cpu();
  const int replicas = static_cast<int>(modules_.size());
  threads_per_replica_ = on_cpu ? options_.threads_per_replica().value_or(std::max(1, at::get_num_threads() / replicas))
                                : 0;
  DPT_CHECK(!on_cpu || threads_per_replica_ >= 1, ConfigError,
            "DataParallel: threads_per_replica must be at least 1, got ", threads_per_replica_);
  threads_ = std::make_shared<detail::ReplicaThreads>(std::vector<int>(modules_.size(), threads_per_replica_));
}

DataParallelBase::~DataParallelBase() = default;

// Before every forward, as PyTorch's DataParallel replicates before every forward: LibTorch's
// optimizers (1.13's at least) update parameters through .data(), which leaves their version
// counters unchanged, so nothing cheaper tells what changed. While an earlier output still awaits its backward, the
// replicas' tensors are saved in its graph: then only tensors that differ are copied (identical
// weights, as in a siamese forward, are left alone), and a real change makes that backward fail
// loudly on autograd's in-place check instead of using the new values.
void DataParallelBase::sync_replicas() {
  torch::NoGradGuard no_grad;
  const bool graphs_pending = pending_backwards_->load() > 0;
  const std::vector<at::Tensor>& primary = tensors_[0];
  for (size_t k = 1; k < modules_.size(); ++k) {
    if (modules_[k]->is_training() != modules_[0]->is_training()) modules_[k]->train(modules_[0]->is_training());
    for (size_t i = 0; i < primary.size(); ++i) {
      at::Tensor& replica = tensors_[k][i];
      const at::Tensor source = primary[i].to(replica.device());
      if (!graphs_pending || !at::equal(replica, source)) replica.copy_(source);
      if (i < num_parameters_ && replica.requires_grad() != primary[i].requires_grad()) {
        replica.requires_grad_(primary[i].requires_grad());
      }
    }
  }
}

at::Tensor DataParallelBase::forward_replicas(const at::Tensor& input, const ReplicaForward& forward) {
  const int64_t dim = options_.dim();
  DPT_CHECK(input.dim() > dim, ConfigError, "DataParallel: cannot scatter along dim ", dim, " an input of shape ",
            input.sizes());
  const auto sizes = scatter_sizes(input.size(dim), static_cast<int64_t>(modules_.size()));
  const auto offsets = offsets_of(sizes);
  const auto& devices = options_.devices();
  sync_replicas();

  std::vector<at::Tensor> outputs(sizes.size());
  threads_->run(sizes.size(), [&](size_t k) {
    c10::OptionalDeviceGuard guard(current_device_for(devices[k]));
    outputs[k] = forward(k, input.narrow(dim, offsets[k], sizes[k]).to(devices[k]));
  });

  std::vector<at::Tensor> pieces;
  bool requires_grad = false;
  for (const auto& output : outputs) {
    DPT_CHECK(output.dim() > dim, ConfigError, "DataParallel: cannot gather along dim ", dim,
              " a replica output of shape ", output.sizes());
    pieces.push_back(output.detach().to(*options_.output_device()));
    requires_grad = requires_grad || output.requires_grad();
  }
  at::Tensor gathered = at::cat(pieces, dim);
  if (!requires_grad) return gathered;
  std::vector<std::vector<at::Tensor>> parameters;
  for (const auto& tensors : tensors_) {
    parameters.emplace_back(tensors.begin(), tensors.begin() + static_cast<int64_t>(num_parameters_));
  }
  auto node = compat::make_node<GatherBackward>(std::move(outputs), sizes, dim, devices, std::move(parameters),
                                                threads_, pending_backwards_);
  torch::autograd::create_gradient_edge(gathered, std::move(node));
  return gathered;
}

}  // namespace dpt
