#pragma once
// Every operation through the c10d backend (Gloo or NCCL) itself. A backend without an average
// (Gloo) gets each rank's tensor divided by n before the sum: PyTorch's DDP gradients, bit for bit,
// which may differ from sum / n in the last bit when n is not a power of two. Over Gloo, each
// collective first compares every rank's record of it (agreement.h); point-to-point operations
// involve one peer and are not compared.
//
// The comparison is a collective of its own, which Gloo runs after those before it: on a slow link
// it waits for the previous bucket's transfer. So that the caller (DDP's backward) does not wait
// with it, checked collectives start, in the order they were asked for, on a thread of this
// transport's, and their work completes when the backend's does.

#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "dptrain/dist/transport/transport.h"

namespace dpt::dist::transport::process_group {

class Transport : public transport::Transport {
 public:
  // Where checked collectives start: on this transport's thread, or on the caller's where the
  // caller is a thread of a transport's own already (the hierarchical allreduce's leaders).
  enum class Starting { kOnItsThread, kOnTheCallersThread };

  // Collective: asks the backend which of half and bfloat16 it reduces (compat::backend_reduces),
  // every rank at the same point. `note`, when set, says why a faster way was not taken;
  // describe() repeats it. With options.check_agreement(), Gloo's collectives first compare every
  // rank's record of them; options.shared_memory() and store() are not this transport's.
  Transport(compat::BackendPtr backend, const TransportOptions& options, std::string note = {},
            Starting starting = Starting::kOnItsThread);
  ~Transport() override;

  std::string describe() const override;
  std::string backend_name() const override { return backend_->getBackendName(); }
  bool reduces(at::ScalarType type) const override;
  bool scatters(const at::Tensor& like, ReduceOp op) const override;
  compat::WorkPtr all_reduce(at::Tensor tensor, ReduceOp op, const CollectiveRecord& record) override;
  compat::WorkPtr broadcast(at::Tensor tensor, int root, const CollectiveRecord& record) override;
  compat::WorkPtr all_gather(at::Tensor input, at::Tensor output, const CollectiveRecord& record) override;
  compat::WorkPtr reduce_scatter(at::Tensor input, at::Tensor output, ReduceOp op,
                                 const CollectiveRecord& record) override;
  compat::WorkPtr send(at::Tensor tensor, int peer, int tag) override;
  compat::WorkPtr recv(at::Tensor tensor, int peer, int tag) override;

  // With check_agreement, compares every rank's `record` of the collective about to start (unless
  // the record says agreement is implied), in order with the collectives asked for before; every
  // collective above does it first. Blocks.
  void check_agreement(const CollectiveRecord& record);

 private:
  class Starter;  // the thread checked collectives start on
  // `start` after the check of `record`: at once where nothing is checked, else on the starter
  // (a CPU `tensor`) or on this thread once the starter has started what came before (a GPU one).
  compat::WorkPtr checked(const CollectiveRecord& record, const at::Tensor& tensor,
                          std::function<compat::WorkPtr()> start);
  void check_now(const CollectiveRecord& record);

  compat::BackendPtr backend_;
  std::chrono::milliseconds timeout_;
  bool check_agreement_;
  std::shared_ptr<const Abandonment> abandonment_;
  std::string note_;
  std::vector<at::ScalarType> through_float_;  // types the backend cannot reduce itself
  std::unique_ptr<Starter> starter_;  // with check_agreement_ only; last: it calls the backend
};

}  // namespace dpt::dist::transport::process_group
