// The hvd Context, the process-wide one behind the free functions, and those functions.

#include <mutex>

#include "dptrain/common/error.h"
#include "dptrain/parallel/hvd.h"

namespace dpt::hvd {

std::string to_string(ReduceOp op) {
  switch (op) {
    case ReduceOp::Average: return "Average";
    case ReduceOp::Sum: return "Sum";
    case ReduceOp::Min: return "Min";
    case ReduceOp::Max: return "Max";
  }
  return "unknown";
}

std::shared_ptr<Context> Context::create(const dist::InitOptions& options, const Environment& env) {
  int64_t threshold = kDefaultFusionThresholdBytes;
  if (auto bytes = env.get_int("HOROVOD_FUSION_THRESHOLD")) {
    DPT_CHECK(*bytes >= 0, ConfigError, "HOROVOD_FUSION_THRESHOLD must be a number of bytes (0 or more), got ", *bytes);
    threshold = *bytes;
  }
  return std::make_shared<Context>(dist::init_process_group(options, env), threshold);
}

Context::Context(std::shared_ptr<dist::Communicator> comm, int64_t fusion_threshold_bytes)
    : comm_(std::move(comm)), fusion_threshold_bytes_(fusion_threshold_bytes) {
  DPT_CHECK(comm_, ConfigError, "an hvd::Context needs a communicator");
  DPT_CHECK(fusion_threshold_bytes_ >= 0, ConfigError, "rank ", comm_->rank(),
            ": the fusion threshold must be 0 or more bytes, got ", fusion_threshold_bytes_);
}

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
  initialized("broadcast_parameters")->broadcast_parameters(tensors, root_rank);
}

void broadcast_optimizer_state(torch::optim::Optimizer& optimizer, int root_rank) {
  initialized("broadcast_optimizer_state")->broadcast_optimizer_state(optimizer, root_rank);
}

}  // namespace dpt::hvd
