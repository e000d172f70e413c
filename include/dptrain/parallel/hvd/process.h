#pragma once
// The process's hvd Context, and Horovod's free functions acting on it.

#include <memory>
#include <string>

#include <torch/optim/optimizer.h>

#include "dptrain/dist/init.h"
#include "dptrain/parallel/hvd/context.h"

namespace dpt::hvd {

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

}  // namespace dpt::hvd
