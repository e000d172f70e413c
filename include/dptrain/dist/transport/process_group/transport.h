#pragma once
// all_reduce through the c10d backend (Gloo or NCCL) itself. A backend without an average (Gloo)
// gets each rank's tensor divided by n before the sum: PyTorch's DDP gradients, bit for bit, which
// may differ from sum / n in the last bit when n is not a power of two.

#include <string>

#include "dptrain/dist/transport/transport.h"

namespace dpt::dist::transport::process_group {

class Transport : public transport::Transport {
 public:
  // `note`, when set, says why a faster way was not taken; describe() repeats it. With
  // `check_agreement`, a Gloo all_reduce first compares every rank's record of it (agreement.h).
  Transport(compat::BackendPtr backend, std::chrono::milliseconds timeout, bool check_agreement,
            std::string note = {});

  std::string describe() const override;
  compat::WorkPtr all_reduce(at::Tensor tensor, ReduceOp op, const CollectiveRecord& record) override;

 private:
  compat::BackendPtr backend_;
  std::chrono::milliseconds timeout_;
  bool check_agreement_;
  std::string note_;
};

}  // namespace dpt::dist::transport::process_group
