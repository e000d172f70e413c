#pragma once
// The Horovod API (horovod.torch) on dptrain. DistributedOptimizer reduces gradients through the
// same Reducer as DistributedDataParallel: Horovod's tensor fusion is the reducer's buckets.
//
//   dpt::hvd::init();                          // under dptrain launch / torchrun, srun or mpirun
//   auto model = dpt::models::resnet20();
//   auto sgd = std::make_shared<torch::optim::SGD>(
//       model->parameters(), torch::optim::SGDOptions(0.05 * dpt::hvd::size()).momentum(0.9));
//   dpt::hvd::broadcast_parameters(dpt::models::state_dict(*model), /*root_rank=*/0);
//   dpt::hvd::broadcast_optimizer_state(*sgd, /*root_rank=*/0);
//   dpt::hvd::DistributedOptimizer optimizer(
//       sgd, model->named_parameters(),
//       dpt::hvd::DistributedOptimizerOptions().compression(dpt::hvd::Compression::Fp16));
//   optimizer.zero_grad();
//   loss.backward();                           // gradients reduced during backward
//   optimizer.step();
//   auto accuracy = dpt::hvd::allreduce(local_accuracy, "val_accuracy");   // the mean over ranks
//
// The free functions act on the process's Context, which init() creates and shutdown() drops.
// Code that runs several ranks in one process (the tests) builds one Context per rank and calls
// the same operations on it.
//
// Named collectives first check, in one extra exchange, that every rank passed the same name,
// dtype and shape (allgather: all but the first dimension). A mismatch throws the same
// ConfigError on every rank, naming the tensor and the ranks, instead of hanging or crashing.

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include <torch/arg.h>
#include <torch/optim/optimizer.h>
#include <torch/ordered_dict.h>

#include "dptrain/common/environment.h"
#include "dptrain/dist/communicator.h"
#include "dptrain/dist/init.h"
#include "dptrain/parallel/reducer.h"

namespace dpt::hvd {

using NamedTensors = torch::OrderedDict<std::string, at::Tensor>;

enum class ReduceOp { Average, Sum, Min, Max };
std::string to_string(ReduceOp op);

// How gradients travel: as they are, or as float16 (half the bytes, float16's range and precision).
enum class Compression { None, Fp16 };

// Horovod's default fusion threshold (HOROVOD_FUSION_THRESHOLD): 64 MiB.
constexpr int64_t kDefaultFusionThresholdBytes = 64 * 1024 * 1024;

class Context {
 public:
  // Joins the job described by the environment (dptrain launch / torchrun variables, Slurm,
  // OpenMPI; see dist/world.h) and `options`. HOROVOD_FUSION_THRESHOLD (bytes) sets the default
  // fusion threshold.
  static std::shared_ptr<Context> create(const dist::InitOptions& options = dist::InitOptions(),
                                         const Environment& env = Environment::current());

  // Over an existing communicator.
  explicit Context(std::shared_ptr<dist::Communicator> comm,
                   int64_t fusion_threshold_bytes = kDefaultFusionThresholdBytes);
  Context(const Context&) = delete;
  Context& operator=(const Context&) = delete;

  int rank() const { return comm_->rank(); }
  int size() const { return comm_->size(); }
  int local_rank() const { return comm_->world().local_rank; }
  int local_size() const { return comm_->world().local_world_size; }
  const std::shared_ptr<dist::Communicator>& communicator() const { return comm_; }
  // The fusion threshold DistributedOptimizers use unless their options name one.
  int64_t fusion_threshold_bytes() const { return fusion_threshold_bytes_; }

  // op over ranks of `tensor`, as a new tensor on `tensor`'s device.
  at::Tensor allreduce(const at::Tensor& tensor, const std::string& name, ReduceOp op = ReduceOp::Average) const;
  // Every rank's `tensor` concatenated along dimension 0, in rank order. First dimensions may
  // differ between ranks; the other dimensions and the dtype must not. A 0-dim tensor counts as
  // one row.
  at::Tensor allgather(const at::Tensor& tensor, const std::string& name) const;
  // `root_rank`'s tensor, as a new tensor on `tensor`'s device.
  at::Tensor broadcast(const at::Tensor& tensor, int root_rank, const std::string& name) const;

  // Copies `root_rank`'s values into every rank's tensors, in place: model->named_parameters()
  // or a state dict (parameters and buffers). Every rank must pass the same names and shapes.
  void broadcast_parameters(const NamedTensors& tensors, int root_rank) const;
  // Makes every rank's optimizer state and hyper-parameters (learning rate, momentum, ...) those
  // of `root_rank`, whatever the optimizer. Ranks whose state is still empty (no step yet) get
  // root's state; when root's is empty, every rank's becomes empty.
  void broadcast_optimizer_state(torch::optim::Optimizer& optimizer, int root_rank) const;

 private:
  void check_agreement(const std::string& operation, const std::string& name,
                       const std::vector<std::string>& lines, const std::string& rule) const;
  void check_root(const std::string& operation, const std::string& name, int root_rank) const;

  std::shared_ptr<dist::Communicator> comm_;
  int64_t fusion_threshold_bytes_;
};

// The process's Context. init() joins the job (a second call while initialized does nothing);
// shutdown() drops the Context (communicators held by DistributedOptimizers stay alive with them).
// Every other free function throws ConfigError before init().
void init(const dist::InitOptions& options = dist::InitOptions());
void shutdown();
bool is_initialized();
std::shared_ptr<Context> context();

// init() on construction, shutdown() on destruction.
class InitGuard {
 public:
  explicit InitGuard(const dist::InitOptions& options = dist::InitOptions()) { init(options); }
  ~InitGuard() { shutdown(); }
  InitGuard(const InitGuard&) = delete;
  InitGuard& operator=(const InitGuard&) = delete;
};

int rank();
int size();
int local_rank();
int local_size();
at::Tensor allreduce(const at::Tensor& tensor, const std::string& name, ReduceOp op = ReduceOp::Average);
at::Tensor allgather(const at::Tensor& tensor, const std::string& name);
at::Tensor broadcast(const at::Tensor& tensor, int root_rank, const std::string& name);
void broadcast_parameters(const NamedTensors& tensors, int root_rank);
void broadcast_optimizer_state(torch::optim::Optimizer& optimizer, int root_rank);

struct DistributedOptimizerOptions {
  // Gradients travel as float16 (Fp16) or in their own dtype.
  TORCH_ARG(Compression, compression) = Compression::None;
  // Backward passes per step: the first n-1 accumulate locally, the n-th reduces the sum of the
  // n passes' gradients (as Horovod, no division by n: scale the loss by 1/n for the mean).
  TORCH_ARG(int, backward_passes_per_step) = 1;
  // Average or Sum over ranks.
  TORCH_ARG(ReduceOp, op) = ReduceOp::Average;
  // Tensor fusion: gradients are packed, in the order backward produces them, into buffers of up
  // to this many bytes, each reduced in one collective. 0 reduces every tensor on its own. Unset:
  // the context's (HOROVOD_FUSION_THRESHOLD, else 64 MiB).
  TORCH_ARG(std::optional<int64_t>, fusion_threshold_bytes) = std::nullopt;
  // Tolerate parameters that get no gradient in a step (see ReducerOptions); without it such a
  // step fails with an error naming them.
  TORCH_ARG(bool, find_unused_parameters) = false;
};

// Wraps an optimizer: gradients are reduced across ranks during backward, bucket by bucket as
// they become ready, and the reducing backward returns only once all of them are reduced. So
// synchronize() (for gradient clipping before step) only checks that the reduction happened, and
// step() is synchronize() followed by the wrapped optimizer's step.
class DistributedOptimizer {
 public:
  // `named_parameters` names every parameter `optimizer` trains (model->named_parameters()); its
  // order, the model's registration order, decides the fusion buffers.
  DistributedOptimizer(std::shared_ptr<torch::optim::Optimizer> optimizer, const NamedTensors& named_parameters,
                       DistributedOptimizerOptions options = {});
  DistributedOptimizer(const Context& context, std::shared_ptr<torch::optim::Optimizer> optimizer,
                       const NamedTensors& named_parameters, DistributedOptimizerOptions options = {});
  DistributedOptimizer(const DistributedOptimizer&) = delete;
  DistributedOptimizer& operator=(const DistributedOptimizer&) = delete;

  // Zeroes the gradients and starts counting backward passes anew. Throws ConfigError between
  // the backward passes of one step (it would drop the passes already accumulated).
  void zero_grad();
  // Throws ConfigError unless this step's backward passes have all run (the gradients are then
  // reduced); does nothing when called again before step().
  void synchronize();
  void step();

  torch::optim::Optimizer& optimizer() { return *optimizer_; }
  const Reducer& reducer() const { return reducer_; }

 private:
  std::shared_ptr<torch::optim::Optimizer> optimizer_;
  std::shared_ptr<dist::Communicator> comm_;
  DistributedOptimizerOptions options_;
  Reducer reducer_;
};

}  // namespace dpt::hvd
