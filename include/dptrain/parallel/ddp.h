#pragma once
// DistributedDataParallel: one model replica per process, gradients averaged across ranks during
// backward (bucketed allreduce overlapped with the backward pass), as PyTorch's DDP.
//
//   auto comm = dpt::dist::init_process_group();
//   dpt::DistributedDataParallel ddp(model, comm, dpt::DDPOptions().reducer(dpt::ReducerOptions().bucket_cap_mb(25)));
//   torch::optim::SGD optimizer(ddp.parameters(), torch::optim::SGDOptions(0.1).momentum(0.9));
//   auto loss = torch::nn::functional::cross_entropy(ddp->forward(x), y);
//   loss.backward();                    // on return every .grad holds the mean over ranks
//   optimizer.step();
//
//   { auto guard = ddp.no_sync(); micro_loss.backward(); }   // accumulate locally
//   ddp.register_comm_hook(dpt::comm_hooks::fp16_compress());
//
//   dpt::Join join({&ddp});   // shards of different lengths (join.h)
//
// Construction checks that every rank built the same model (a ConfigError naming the first
// difference, on every rank) and copies rank 0's parameters and buffers to all ranks.

#include <chrono>
#include <functional>
#include <memory>
#include <tuple>
#include <type_traits>
#include <utility>
#include <vector>

#include <torch/arg.h>
#include <torch/nn/module.h>
#include <torch/nn/pimpl.h>

#include "dptrain/common/error.h"
#include "dptrain/dist/communicator.h"
#include "dptrain/parallel/comm_hooks.h"
#include "dptrain/parallel/join.h"
#include "dptrain/parallel/module_handle.h"
#include "dptrain/parallel/reducer.h"

namespace dpt {

struct DDPOptions {
  // Gradient buckets and unused parameters (reducer.h). backward_passes > 1 accumulates that many
  // backward passes locally before each reduction, as no_sync() does one guard at a time.
  TORCH_ARG(ReducerOptions, reducer) = {};
  // Copy rank 0's buffers (e.g. BatchNorm running statistics) to every rank before each forward.
  TORCH_ARG(bool, broadcast_buffers) = true;
};

// Where the last synchronized step's time went, in milliseconds.
struct StepTiming {
  double forward_ms = 0;     // forward, including the buffer broadcast
  double backward_ms = 0;    // from the end of forward to gradients ready (loss computation included)
  double comm_wait_ms = 0;   // communication still running when backward had finished computing
  // When each bucket's communication started, in launch order, in ms after the end of forward:
  // how early backward let the gradients go (what a slow link can hide depends on it).
  std::vector<double> bucket_launch_ms;
};

// The part of DistributedDataParallel that does not depend on the module's type.
class DistributedDataParallelBase : public Joinable {
 public:
  DistributedDataParallelBase(std::shared_ptr<torch::nn::Module> module, std::shared_ptr<dist::Communicator> comm,
                              DDPOptions options);
  DistributedDataParallelBase(const DistributedDataParallelBase&) = delete;
  DistributedDataParallelBase& operator=(const DistributedDataParallelBase&) = delete;

  // Backward passes inside the guard's lifetime accumulate gradients locally, that of a forward
  // taken just before the guard too (PyTorch would reduce that one: it decides at forward time);
  // the backward of the first forward after it reduces the accumulated sum.
  class NoSyncGuard {
   public:
    // A forward before the guard armed the reducer for its backward: that backward stays local too.
    explicit NoSyncGuard(DistributedDataParallelBase& ddp) : ddp_(&ddp), previous_(ddp.sync_) {
      ddp.sync_ = false;
      ddp.reducer_.disarm();
    }
    ~NoSyncGuard() {
      if (ddp_) ddp_->sync_ = previous_;
    }
    NoSyncGuard(NoSyncGuard&& other) noexcept : ddp_(std::exchange(other.ddp_, nullptr)), previous_(other.previous_) {}
    NoSyncGuard(const NoSyncGuard&) = delete;
    NoSyncGuard& operator=(const NoSyncGuard&) = delete;
    NoSyncGuard& operator=(NoSyncGuard&&) = delete;

   private:
    DistributedDataParallelBase* ddp_;
    bool previous_;
  };
  [[nodiscard]] NoSyncGuard no_sync() { return NoSyncGuard(*this); }

  // Replaces the default mean allreduce (see comm_hooks.h).
  void register_comm_hook(CommHook hook) { reducer_.set_comm_hook(std::move(hook)); }

  // Copies rank 0's buffers (BatchNorm running statistics) to every rank, as each forward does
  // first when broadcast_buffers is on. For using the wrapped module directly, e.g. to evaluate it
  // once on every rank, as Python's DDP forward in eval mode would. Collective.
  void broadcast_buffers();

  std::vector<at::Tensor> parameters() const { return module_->parameters(); }
  const DDPOptions& options() const { return options_; }
  dist::Communicator& communicator() const { return *comm_; }
  const Reducer& reducer() const { return reducer_; }
  Reducer& reducer() { return reducer_; }

  // Timing of the last step whose backward reduced gradients.
  StepTiming last_timing() const;

  // Joinable (join.h): a forward and backward of an empty batch shaped like the last one, which
  // runs every collective of a step (buffers, SyncBatchNorm, buckets) with nothing to add.
  void shadow_step() override;
  void take_final_state(int root) override;
  dist::Communicator& join_communicator() const override { return *comm_; }

 protected:
  void before_forward();
  void after_forward();
  // Inside a Join, each training forward remembers how to run itself on an empty batch like its
  // own; a shadow step runs that (and must not replace it while it runs).
  bool records_shadow_forward() const { return active_join() != nullptr && !shadowing_; }
  void remember_shadow_forward(std::function<at::Tensor()> forward_empty) { shadow_forward_ = std::move(forward_empty); }

 private:
  static std::vector<NamedParameter> trainable_parameters(const torch::nn::Module& module);
  // Copies `root`'s parameters and buffers to every rank. Collective.
  void broadcast_state(int root);

  std::shared_ptr<torch::nn::Module> module_;
  std::shared_ptr<dist::Communicator> comm_;
  DDPOptions options_;
  Reducer reducer_;
  std::vector<at::Tensor> buffers_;
  bool sync_ = true;
  std::function<at::Tensor()> shadow_forward_;
  bool shadowing_ = false;
  std::chrono::steady_clock::time_point forward_start_{}, forward_end_{};
  double forward_ms_ = 0;
};

// `ModuleType` is a module holder (torch::nn::Sequential, a TORCH_MODULE) or a shared_ptr to a
// module; its forward's arguments and result pass through unchanged.
//
// Not a torch::nn::Module itself: forward keeps the wrapped module's own signature (a LibTorch
// module's forward is one fixed signature per type), and registering the model as a submodule
// would prefix every parameter name with "module.", the names Python's DDP checkpoints carry and
// users strip. train()/eval(), state dicts and checkpoints go through module(), under the plain
// model's names.
template <typename ModuleType>
class DistributedDataParallel : public DistributedDataParallelBase {
 public:
  DistributedDataParallel(ModuleType module, std::shared_ptr<dist::Communicator> comm, DDPOptions options = {})
      : DistributedDataParallelBase(detail::as_module(module), std::move(comm), options), module_(std::move(module)) {}

  template <typename... Args>
  auto forward(Args&&... args) {
    if (records_shadow_forward()) remember_shadow_forward(shadow_forward_of(args...));
    before_forward();
    auto output = module_->forward(std::forward<Args>(args)...);
    after_forward();
    return output;
  }
  template <typename... Args>
  decltype(auto) operator()(Args&&... args) {
    return forward(std::forward<Args>(args)...);
  }

  // `ddp->forward(x)` reads like a module holder's call.
  DistributedDataParallel* operator->() { return this; }

  ModuleType& module() { return module_; }

 private:
  // A tensor argument with no rows (its other dimensions kept); anything else as it is, so a batch
  // passed in another type (a vector of tensors) cannot be shadowed.
  template <typename T>
  static auto without_rows(const T& arg) {
    if constexpr (std::is_same_v<std::decay_t<T>, at::Tensor>) {
      auto sizes = arg.sizes().vec();
      if (!sizes.empty()) sizes[0] = 0;
      return at::empty(sizes, arg.options());
    } else {
      return arg;
    }
  }
  template <typename... Args>
  std::function<at::Tensor()> shadow_forward_of(const Args&... args) {
    return [this, empty = std::make_tuple(without_rows(args)...)]() {
      return std::apply(
          [this](const auto&... a) -> at::Tensor {
            auto output = forward(a...);
            if constexpr (std::is_convertible_v<decltype(output), at::Tensor>) {
              return output;
            } else {
              DPT_CHECK(false, ConfigError, "rank ", communicator().rank(), ": Join shadows a step by a backward "
                        "from the forward's output, which must then be a tensor");
              return at::Tensor();
            }
          },
          empty);
    };
  }

  ModuleType module_;
};

}  // namespace dpt
