#include "lockstep.h"

#include "dptrain/data/sampler.h"

namespace dpt::train {

Lockstep::Lockstep(std::shared_ptr<dist::Communicator> comm, bool together)
    : comm_(std::move(comm)), together_(together) {}

MetricSums Lockstep::sum(const MetricSums& local) const { return together_ ? local.reduced(*comm_) : local; }

int64_t Lockstep::sum(int64_t local) const {
  if (!together_) return local;
  // float64 holds counts exactly up to 2^53; and Gloo reduces it on every version.
  at::Tensor total = at::tensor({static_cast<double>(local)}, at::kDouble).to(comm_->device());
  comm_->all_reduce(total, dist::ReduceOp::Sum);
  return static_cast<int64_t>(total.item<double>());
}

void Lockstep::barrier() const {
  if (together_) comm_->barrier();
}

std::vector<int64_t> Lockstep::validation_indices(int64_t size) const {
  if (!together_) return validates() ? data::EvalSampler(size, 1, 0).indices() : std::vector<int64_t>{};
  return data::EvalSampler(size, comm_->size(), comm_->rank()).indices();
}

}  // namespace dpt::train
