// The process-wide hvd Context behind the free functions, and those functions.

#include <mutex>

#include "dptrain/common/error.h"
#include "dptrain/parallel/hvd/broadcast_state.h"
#include "dptrain/parallel/hvd/process.h"

namespace dpt::hvd {

namespace {

std::mutex process_mutex;
std::shared_ptr<Context> process_context;

std::shared_ptr<Context> initialized(const char* function) {
  std::lock_guard<std::mutex> lock(process_mutex);
  DPT_CHECK(process_context, ConfigError, "dpt::hvd::", function,
            "() was called before dpt::hvd::init() (or after dpt::hvd::shutdown()); call dpt::hvd::init() first, "
            "in a process started by dptrain launch, torchrun, srun or mpirun");
  return process_context;
}

}  // namespace

void init(const dist::InitOptions& options) {
  std::lock_guard<std::mutex> lock(process_mutex);
  if (!process_context) process_context = Context::create(options);
}

void shutdown() {
  std::lock_guard<std::mutex> lock(process_mutex);
  process_context.reset();
}

bool is_initialized() {
  std::lock_guard<std::mutex> lock(process_mutex);
  return static_cast<bool>(process_context);
}

std::shared_ptr<Context> context() { return initialized("context"); }

int rank() { return initialized("rank")->rank(); }
int size() { return initialized("size")->size(); }
int local_rank() { return initialized("local_rank")->local_rank(); }
int local_size() { return initialized("local_size")->local_size(); }

at::Tensor allreduce(const at::Tensor& tensor, const std::string& name, ReduceOp op) {
  return initialized("allreduce")->allreduce(tensor, name, op);
}

at::Tensor allgather(const at::Tensor& tensor, const std::string& name) {
  return initialized("allgather")->allgather(tensor, name);
}

at::Tensor broadcast(const at::Tensor& tensor, int root_rank, const std::string& name) {
  return initialized("broadcast")->broadcast(tensor, root_rank, name);
}

void broadcast_parameters(const NamedTensors& tensors, int root_rank) {
  broadcast_parameters(*initialized("broadcast_parameters"), tensors, root_rank);
}

void broadcast_optimizer_state(torch::optim::Optimizer& optimizer, int root_rank) {
  broadcast_optimizer_state(*initialized("broadcast_optimizer_state"), optimizer, root_rank);
}

}  // namespace dpt::hvd
