#pragma once
// A transport that takes some operations itself and passes every other one to the c10d backend's
// own transport beneath it: what shared memory (shm/transport.h) and the hierarchical allreduce
// (hierarchical/transport.h) share. A subclass overrides what it takes; its members, destroyed
// before this base, finish what they hold while the backend is still there.

#include <memory>
#include <string>

#include "dptrain/dist/transport/process_group/transport.h"
#include "dptrain/dist/transport/transport.h"

namespace dpt::dist::transport {

class OverBackend : public Transport {
 public:
  explicit OverBackend(std::unique_ptr<process_group::Transport> backend) : backend_(std::move(backend)) {}

  std::string backend_name() const override { return backend_->backend_name(); }
  bool reduces(at::ScalarType type) const override { return backend_->reduces(type); }
  bool scatters(const at::Tensor& like, ReduceOp op) const override { return backend_->scatters(like, op); }
  compat::WorkPtr all_reduce(at::Tensor tensor, ReduceOp op, const CollectiveRecord& record) override {
    return backend_->all_reduce(std::move(tensor), op, record);
  }
  compat::WorkPtr broadcast(at::Tensor tensor, int root, const CollectiveRecord& record) override {
    return backend_->broadcast(std::move(tensor), root, record);
  }
  compat::WorkPtr all_gather(at::Tensor input, at::Tensor output, const CollectiveRecord& record) override {
    return backend_->all_gather(std::move(input), std::move(output), record);
  }
  compat::WorkPtr reduce_scatter(at::Tensor input, at::Tensor output, ReduceOp op,
                                 const CollectiveRecord& record) override {
    return backend_->reduce_scatter(std::move(input), std::move(output), op, record);
  }
  compat::WorkPtr send(at::Tensor tensor, int peer, int tag) override {
    return backend_->send(std::move(tensor), peer, tag);
  }
  compat::WorkPtr recv(at::Tensor tensor, int peer, int tag) override {
    return backend_->recv(std::move(tensor), peer, tag);
  }

 protected:
  process_group::Transport& backend() const { return *backend_; }

 private:
  std::unique_ptr<process_group::Transport> backend_;
};

}  // namespace dpt::dist::transport
