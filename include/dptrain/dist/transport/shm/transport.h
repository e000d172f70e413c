#pragma once
// all_reduce and all_gather through shared memory (shm/allreduce.h) for what it takes, float32 and
// float64 CPU tensors; everything else, and every broadcast and point-to-point operation, through
// the c10d backend it was given. A reduce-scatter of such tensors is no true one here: the whole
// sum through shared memory costs about a copy in and out per rank, where over a network it would
// carry world times the bytes of a true reduce_scatter.

#include <memory>
#include <string>

#include "dptrain/dist/transport/over_backend.h"
#include "dptrain/dist/transport/shm/allreduce.h"

namespace dpt::dist::transport::shm {

class Transport : public OverBackend {
 public:
  Transport(std::unique_ptr<Allreduce> local, std::unique_ptr<process_group::Transport> fallback);
  ~Transport() override;

  std::string describe() const override;
  bool scatters(const at::Tensor& like, ReduceOp op) const override {
    return !local_->accepts(like, ReduceOp::Sum) && OverBackend::scatters(like, op);
  }
  compat::WorkPtr all_reduce(at::Tensor tensor, ReduceOp op, const CollectiveRecord& record) override;
  compat::WorkPtr all_gather(at::Tensor input, at::Tensor output, const CollectiveRecord& record) override;
  std::chrono::milliseconds failure_report_delay() const override { return Allreduce::kFailureReportDelay; }

 private:
  std::unique_ptr<Allreduce> local_;  // destroyed before the backend: finishes what is queued
};

}  // namespace dpt::dist::transport::shm
