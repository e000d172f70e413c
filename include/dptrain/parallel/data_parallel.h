#pragma once
// DataParallel: one process drives K replicas of a model, as PyTorch's torch.nn.DataParallel.
//
//   auto model = dpt::models::resnet20(dpt::models::ResNetOptions().num_classes(10));
//   dpt::DataParallel dp(model, dpt::DataParallelOptions(dpt::cpu_devices(2)));   // or cuda_devices({4, 5, 6, 7})
//   torch::optim::SGD optimizer(dp.parameters(), torch::optim::SGDOptions(0.1).momentum(0.9));
//   auto loss = torch::nn::functional::cross_entropy(dp->forward(images), labels);
//   loss.backward();        // model's .grad: the gradient of the loss over the whole batch
//   optimizer.step();       // the next forward copies the new weights to the other replicas
//
// Each forward splits the batch along `dim` into torch.chunk's pieces, runs replica k on piece k
// in its own thread (a long-lived one per replica, with its own intra-op thread count), and
// concatenates the outputs on the output device. The loss is computed once, on that gathered
// output, so backward starts from the full batch's output gradient: each replica's backward runs
// on its piece of it, in parallel again (CPU replicas: in their threads; CUDA replicas: on the
// autograd engine's thread for each device), and the other replicas' gradients are then added
// into the primary module's .grad (replica 0 is the module given, on devices[0]). Before
// each forward, the primary's parameters, buffers and train/eval mode are copied to the others.
//
// On CPU, start the process with OMP_WAIT_POLICY=PASSIVE: OpenMP threads that wait by spinning
// take the cores the replica threads need (bench/data_parallel, ResNet-18 on 2 cores: 29 img/s
// without it, 54 with it, DDP on 2 processes 49).
//
// The result equals one replica on the whole batch up to the order of floating-point sums.
// The input gets no gradient (classification training never needs one), and a second backward
// through the same output is refused (each replica's graph is freed after its backward). Several
// forwards before one backward (a siamese pair) work while the weights and buffers stay as they
// are in between; a model with BatchNorm in training mode changes its statistics, so there run
// backward after each forward (otherwise autograd reports an in-place modification).

#include <atomic>
#include <functional>
#include <memory>
#include <optional>
#include <utility>
#include <vector>

#include <torch/arg.h>
#include <torch/nn/module.h>
#include <torch/nn/pimpl.h>

#include "dptrain/parallel/module_handle.h"

namespace dpt {

namespace detail {
class ReplicaThreads;
}

struct DataParallelOptions {
  explicit DataParallelOptions(std::vector<torch::Device> devices) : devices_(std::move(devices)) {}
  // One replica per entry, in this order; the first holds the module given (the primary).
  TORCH_ARG(std::vector<torch::Device>, devices);
  // Where the outputs are gathered and the loss is computed; unset: devices[0].
  TORCH_ARG(std::optional<torch::Device>, output_device) = std::nullopt;
  // The dimension the input is split along and the outputs are concatenated along.
  TORCH_ARG(int64_t, dim) = 0;
  // Intra-op threads of each CPU replica's thread; unset: the caller's count shared out among
  // the CPU replicas, at least one each.
  TORCH_ARG(std::optional<int>, threads_per_replica) = std::nullopt;
};

// `replicas` replicas on the CPU: one thread drives each.
std::vector<torch::Device> cpu_devices(int replicas);

// The listed CUDA devices as this process numbers them (after CUDA_VISIBLE_DEVICES), in the order
// given: {4, 5, 6, 7} -> cuda:4..cuda:7; {6, 4} -> cuda:6 (the primary), cuda:4. Throws
// ConfigError for an index this process cannot see, or in a CPU-only build.
std::vector<torch::Device> cuda_devices(const std::vector<int>& gpus);

// The sizes torch.chunk (and so DataParallel's scatter) cuts `n` rows into for `k` replicas:
// ceil(n / k) each, the last piece smaller, and fewer than k pieces when the rows run out first:
// 10 for 3 -> {4, 4, 2}; 7 for 3 -> {3, 3, 1}; 5 for 4 -> {2, 2, 1}. Replicas past the last
// piece sit that step out.
std::vector<int64_t> scatter_sizes(int64_t n, int64_t k);

// The part of DataParallel that does not depend on the module's type.
class DataParallelBase {
 public:
  // `modules[0]` is the primary, already on devices[0]; the others are its clones on the other
  // devices (same parameters and buffers, in the same order).
  DataParallelBase(std::vector<std::shared_ptr<torch::nn::Module>> modules, DataParallelOptions options);
  ~DataParallelBase();
  DataParallelBase(const DataParallelBase&) = delete;
  DataParallelBase& operator=(const DataParallelBase&) = delete;

  // The primary's parameters: give these to the optimizer.
  std::vector<at::Tensor> parameters() const { return modules_[0]->parameters(); }
  // Options with output_device resolved.
  const DataParallelOptions& options() const { return options_; }
  size_t replica_count() const { return modules_.size(); }
  // The intra-op thread count each CPU replica's thread runs with.
  int threads_per_replica() const { return threads_per_replica_; }

 protected:
  using ReplicaForward = std::function<at::Tensor(size_t replica, const at::Tensor& piece)>;
  // Copies the primary's changes to the replicas, scatters, runs `forward` on each replica's
  // thread, gathers (with the backward described above attached).
  at::Tensor forward_replicas(const at::Tensor& input, const ReplicaForward& forward);

  // A deep copy of `module` on `device`; ConfigError when the module is not Cloneable.
  static std::shared_ptr<torch::nn::Module> clone_module(const torch::nn::Module& module, torch::Device device);
  static void check_devices(const DataParallelOptions& options);

 private:
  void sync_replicas();

  std::vector<std::shared_ptr<torch::nn::Module>> modules_;
  DataParallelOptions options_;
  int threads_per_replica_ = 0;
  size_t num_parameters_ = 0;
  std::vector<std::vector<at::Tensor>> tensors_;  // per replica: parameters, then buffers
  // Outputs whose backward has not run yet (their graphs hold the replicas' tensors).
  std::shared_ptr<std::atomic<int>> pending_backwards_ = std::make_shared<std::atomic<int>>(0);
  std::shared_ptr<detail::ReplicaThreads> threads_;
};

// `ModuleType` is a module holder (torch::nn::Sequential, a TORCH_MODULE) or a shared_ptr to a
// module, Cloneable, whose forward takes one tensor and returns one tensor. Not a
// torch::nn::Module, for the reasons DistributedDataParallel gives (ddp.h): train()/eval(), state
// dicts and checkpoints go through module(), the model given to the constructor.
template <typename ModuleType>
class DataParallel : public DataParallelBase {
 public:
  DataParallel(ModuleType module, DataParallelOptions options)
      : DataParallel(make_replicas(std::move(module), options), options) {}

  at::Tensor forward(const at::Tensor& input) {
    return forward_replicas(input, [this](size_t k, const at::Tensor& piece) -> at::Tensor {
      return replicas_[k]->forward(piece);
    });
  }
  at::Tensor operator()(const at::Tensor& input) { return forward(input); }

  // `dp->forward(x)` reads like a module holder's call.
  DataParallel* operator->() { return this; }

  // The primary module (replica 0), the one given to the constructor.
  ModuleType& module() { return replicas_[0]; }

 private:
  DataParallel(std::vector<ModuleType> replicas, DataParallelOptions options)
      : DataParallelBase(as_modules(replicas), std::move(options)), replicas_(std::move(replicas)) {}

  static std::vector<ModuleType> make_replicas(ModuleType module, const DataParallelOptions& options) {
    check_devices(options);
    const auto& devices = options.devices();
    detail::as_module(module)->to(devices[0]);
    std::vector<ModuleType> replicas{module};
    for (size_t k = 1; k < devices.size(); ++k) {
      replicas.push_back(typed(module, clone_module(*detail::as_module(module), devices[k])));
    }
    return replicas;
  }
  static std::vector<std::shared_ptr<torch::nn::Module>> as_modules(const std::vector<ModuleType>& replicas) {
    std::vector<std::shared_ptr<torch::nn::Module>> modules;
    for (const auto& r : replicas) modules.push_back(detail::as_module(r));
    return modules;
  }

  template <typename Impl>
  static ModuleType typed(const torch::nn::ModuleHolder<Impl>&,
                                             const std::shared_ptr<torch::nn::Module>& clone) {
    return ModuleType(std::dynamic_pointer_cast<Impl>(clone));
  }
  template <typename Impl>
  static std::shared_ptr<Impl> typed(const std::shared_ptr<Impl>&, const std::shared_ptr<torch::nn::Module>& clone) {
    return std::dynamic_pointer_cast<Impl>(clone);
  }

  std::vector<ModuleType> replicas_;
};

}  // namespace dpt
