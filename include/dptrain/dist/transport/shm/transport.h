#pragma once
// all_reduce and all_gather through shared memory (shm/allreduce.h) for what it takes, float32 and
// float64 CPU tensors; everything else, and every broadcast and point-to-point operation, through
// the c10d backend it was given. A reduce-scatter of such tensors is no true one here: the whole
// sum through shared memory costs about a copy in and out per rank, where over a network it would
// carry world times the bytes of a true reduce_scatter.

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
  std::string backend_name() const override { return fallback_->backend_name(); }
  bool reduces(at::ScalarType type) const override { return fallback_->reduces(type); }
  bool scatters(const at::Tensor& like, ReduceOp op) const override {
    return !local_->accepts(like, ReduceOp::Sum) && fallback_->scatters(like, op);
  }
  compat::WorkPtr all_reduce(at::Tensor tensor, ReduceOp op, const CollectiveRecord& record) override;
  compat::WorkPtr broadcast(at::Tensor tensor, int root, const CollectiveRecord& record) override {
    return fallback_->broadcast(std::move(tensor), root, record);
  }
  compat::WorkPtr all_gather(at::Tensor input, at::Tensor output, const CollectiveRecord& record) override;
  compat::WorkPtr reduce_scatter(at::Tensor input, at::Tensor output, ReduceOp op,
                                 const CollectiveRecord& record) override {
    return fallback_->reduce_scatter(std::move(input), std::move(output), op, record);
  }
  compat::WorkPtr send(at::Tensor tensor, int peer, int tag) override {
    return fallback_->send(std::move(tensor), peer, tag);
  }
  compat::WorkPtr recv(at::Tensor tensor, int peer, int tag) override {
    return fallback_->recv(std::move(tensor), peer, tag);
  }
  std::chrono::milliseconds failure_report_delay() const override { return Allreduce::kFailureReportDelay; }

 private:
  // Declared first, destroyed last: the shared-memory thread finishes or fails what is queued
  // while the backend is still there.
  std::unique_ptr<process_group::Transport> fallback_;
  std::unique_ptr<Allreduce> local_;
};

}  // namespace dpt::dist::transport::shm
