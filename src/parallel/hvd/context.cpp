// The hvd Context: joining a job, and its named collectives.
#include <algorithm>

#include "dptrain/common/error.h"
#include "dptrain/parallel/hvd/context.h"
#include "dptrain/parallel/replicas.h"

namespace dpt::hvd {

namespace {

dist::ReduceOp to_dist(ReduceOp op) {
  switch (op) {
    case ReduceOp::Average: return dist::ReduceOp::Mean;  // allreduce divides itself; see there
    case ReduceOp::Sum: return dist::ReduceOp::Sum;
    case ReduceOp::Min: return dist::ReduceOp::Min;
    case ReduceOp::Max: return dist::ReduceOp::Max;
  }
  throw InternalError("unknown hvd::ReduceOp");
}

std::string describe(const std::string& name, const at::Tensor& tensor) {
  if (!tensor.defined()) return str("'", name, "' (an undefined tensor)");
  return str("'", name, "' of shape ", tensor.sizes(), " and dtype ", tensor.scalar_type());
}

}  // namespace

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

void Context::check_agreement(const std::string& operation, const std::string& name,
                              const std::vector<std::string>& lines, const std::string& rule) const {
  const auto d = compare_with_root(*comm_, lines);
  if (!d) return;
  throw ConfigError(str("rank ", rank(), ": hvd::", operation, name.empty() ? "" : " '" + name + "'",
                        ": rank 0 and rank ", d->rank, " disagree",
                        d->root_lines > 1 ? str(" at entry ", d->entry) : std::string(), ": rank 0 passes ",
                        d->on_root, ", rank ", d->rank, " passes ", d->on_rank, ". ", rule));
}

void Context::check_root(const std::string& operation, const std::string& name, int root_rank) const {
  DPT_CHECK(root_rank >= 0 && root_rank < size(), ConfigError, "rank ", rank(), ": hvd::", operation,
            name.empty() ? "" : " '" + name + "'", ": root_rank ", root_rank, " is not a rank of this job (0..",
            size() - 1, ")");
}

at::Tensor Context::allreduce(const at::Tensor& tensor, const std::string& name, ReduceOp op) const {
  check_agreement("allreduce", name, {describe(name, tensor) + " with op " + to_string(op)},
                  "Every rank must allreduce a tensor of the same name, shape and dtype with the same op, "
                  "in the same order");
  DPT_CHECK(tensor.defined(), ConfigError, "rank ", rank(), ": hvd::allreduce '", name, "': the tensor is undefined");
  DPT_CHECK(op != ReduceOp::Average || at::isFloatingType(tensor.scalar_type()), ConfigError, "rank ", rank(),
            ": hvd::allreduce '", name, "': Average needs a floating-point tensor, got ", tensor.scalar_type(),
            "; use ReduceOp::Sum or convert the tensor");
  at::Tensor wire = tensor.detach().to(comm_->device(), /*non_blocking=*/false, /*copy=*/true).contiguous();
  // Horovod averages after the sum (its postscale), which keeps means of small integers exact;
  // the communicator's mean may divide first (over Gloo, as PyTorch's DDP does).
  if (op == ReduceOp::Average) {
    comm_->all_reduce(wire, dist::ReduceOp::Sum);
    wire.div_(size());
  } else {
    comm_->all_reduce(wire, to_dist(op));
  }
  return wire.to(tensor.device());
}

at::Tensor Context::allgather(const at::Tensor& tensor, const std::string& name) const {
  const at::Tensor rows = tensor.defined() && tensor.dim() == 0 ? tensor.reshape({1}) : tensor;
  const std::string signature =
      rows.defined() ? str("'", name, "' of dtype ", rows.scalar_type(), " with rows of shape ", rows.sizes().slice(1))
                     : describe(name, rows);
  check_agreement("allgather", name, {signature},
                  "Every rank must allgather a tensor of the same name and dtype whose dimensions after the first "
                  "agree, in the same order");
  DPT_CHECK(rows.defined(), ConfigError, "rank ", rank(), ": hvd::allgather '", name, "': the tensor is undefined");
  const auto on = at::TensorOptions().device(comm_->device());
  const auto counts = comm_->all_gather(at::full({1}, rows.size(0), on.dtype(at::kLong)));
  std::vector<int64_t> row_counts;
  for (const auto& c : counts) row_counts.push_back(c.cpu().item<int64_t>());
  const int64_t most = *std::max_element(row_counts.begin(), row_counts.end());
  std::vector<int64_t> padded_shape = rows.sizes().vec();
  padded_shape[0] = most;
  if (most == 0) return at::empty(padded_shape, rows.options());
  // The backend gathers equal shapes only: pad every rank's rows to the longest, then trim.
  at::Tensor padded = at::zeros(padded_shape, on.dtype(rows.scalar_type()));
  padded.narrow(0, 0, rows.size(0)).copy_(rows.detach());
  const auto parts = comm_->all_gather(padded);
  std::vector<at::Tensor> pieces;
  for (size_t r = 0; r < parts.size(); ++r) pieces.push_back(parts[r].narrow(0, 0, row_counts[r]));
  return at::cat(pieces).to(tensor.device());
}

at::Tensor Context::broadcast(const at::Tensor& tensor, int root_rank, const std::string& name) const {
  check_agreement("broadcast", name, {describe(name, tensor) + str(" from rank ", root_rank)},
                  "Every rank must broadcast a tensor of the same name, shape and dtype from the same root, "
                  "in the same order");
  check_root("broadcast", name, root_rank);
  DPT_CHECK(tensor.defined(), ConfigError, "rank ", rank(), ": hvd::broadcast '", name, "': the tensor is undefined");
  at::Tensor wire = tensor.detach().to(comm_->device(), /*non_blocking=*/false, /*copy=*/true).contiguous();
  comm_->broadcast(wire, root_rank);
  return wire.to(tensor.device());
}

}  // namespace dpt::hvd
