#include "dptrain/dist/transport/shm/transport.h"

namespace dpt::dist::transport::shm {

Transport::Transport(std::unique_ptr<Allreduce> local, std::unique_ptr<process_group::Transport> fallback)
    : OverBackend(std::move(fallback)), local_(std::move(local)) {}

Transport::~Transport() = default;

std::string Transport::describe() const { return backend().describe() + " + shared memory"; }

compat::WorkPtr Transport::all_reduce(at::Tensor tensor, ReduceOp op, const CollectiveRecord& record) {
  // The mean is divided as it is summed, on the shared-memory thread, whose ranks compare the
  // step with the size (a rank that skipped a collective is at another step).
  if (local_->accepts(tensor, op)) return local_->all_reduce(std::move(tensor), op, record.step);
  return OverBackend::all_reduce(std::move(tensor), op, record);
}

compat::WorkPtr Transport::all_gather(at::Tensor input, at::Tensor output, const CollectiveRecord& record) {
  if (local_->accepts(input, ReduceOp::Sum)) {
    return local_->all_gather(std::move(input), std::move(output), record.step);
  }
  return OverBackend::all_gather(std::move(input), std::move(output), record);
}

}  // namespace dpt::dist::transport::shm
