#include "dptrain/dist/transport/process_group/transport.h"

#include "../../agreement.h"

namespace dpt::dist::transport::process_group {
namespace {

c10d::ReduceOp to_c10d(ReduceOp op, bool native_avg) {
  switch (op) {
    case ReduceOp::Sum: return c10d::ReduceOp::SUM;
    case ReduceOp::Mean: return native_avg ? c10d::ReduceOp::AVG : c10d::ReduceOp::SUM;
    case ReduceOp::Max: return c10d::ReduceOp::MAX;
    case ReduceOp::Min: return c10d::ReduceOp::MIN;
  }
  return c10d::ReduceOp::SUM;
}

}  // namespace

Transport::Transport(compat::BackendPtr backend, std::chrono::milliseconds timeout, bool check_agreement,
                     std::string note)
    : backend_(std::move(backend)),
      timeout_(timeout),
      check_agreement_(check_agreement && detail::can_check_agreement(*backend_)),
      note_(std::move(note)) {}

std::string Transport::describe() const {
  const std::string name = backend_->getBackendName();
  return note_.empty() ? name : name + " (" + note_ + ")";
}

compat::WorkPtr Transport::all_reduce(at::Tensor tensor, ReduceOp op, const CollectiveRecord& record) {
  if (check_agreement_) detail::check_agreement(*backend_, record, timeout_);
  const bool native_avg = compat::backend_supports_avg(*backend_);
  // Gloo has no average: divide before the sum, here, while the caller (DDP's backward) is still
  // producing gradients, rather than after it, when the reducer waits for every bucket at once.
  // It is also where PyTorch's reducer divides, so DDP's gradients match it bit for bit.
  if (op == ReduceOp::Mean && !native_avg && backend_->getSize() > 1) tensor.div_(backend_->getSize());
  std::vector<at::Tensor> tensors{std::move(tensor)};
  c10d::AllreduceOptions options;
  options.reduceOp = to_c10d(op, native_avg);
  options.timeout = timeout_;
  return backend_->allreduce(tensors, options);
}

}  // namespace dpt::dist::transport::process_group
