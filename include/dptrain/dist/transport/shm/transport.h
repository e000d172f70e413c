#pragma once
// all_reduce through shared memory (shm/allreduce.h) for what it can reduce, float32 and float64
// CPU tensors; everything else through the c10d backend it was given.

#include <memory>
#include <string>

#include "dptrain/dist/transport/process_group/transport.h"
#include "dptrain/dist/transport/shm/allreduce.h"
#include "dptrain/dist/transport/transport.h"

namespace dpt::dist::transport::shm {

class Transport : public transport::Transport {
 public:
  Transport(std::unique_ptr<Allreduce> local, std::unique_ptr<process_group::Transport> fallback);
  ~Transport() override;

  std::string describe() const override;
  compat::WorkPtr all_reduce(at::Tensor tensor, ReduceOp op, const CollectiveRecord& record) override;
  // What the shared memory reduces: float32 and float64 on the CPU.
  bool reduces_in_shared_memory(const at::Tensor& like) const override { return local_->accepts(like, ReduceOp::Sum); }
  compat::WorkPtr all_gather(at::Tensor input, at::Tensor output, const CollectiveRecord& record) override {
    return local_->all_gather(std::move(input), std::move(output), record.step);
  }
  std::chrono::milliseconds failure_report_delay() const override { return Allreduce::kFailureReportDelay; }

 private:
  // Declared first, destroyed last: the shared-memory thread finishes or fails what is queued
  // while the backend is still there.
  std::unique_ptr<process_group::Transport> fallback_;
  std::unique_ptr<Allreduce> local_;
};

}  // namespace dpt::dist::transport::shm
