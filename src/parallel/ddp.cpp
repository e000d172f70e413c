#include "dptrain/parallel/ddp.h"

#include <torch/csrc/autograd/grad_mode.h>

#include "dptrain/common/error.h"
#include "dptrain/parallel/replicas.h"

namespace dpt {

namespace {

double ms_between(std::chrono::steady_clock::time_point a, std::chrono::steady_clock::time_point b) {
  return std::chrono::duration<double, std::milli>(b - a).count();
}

// Checks the replicas before the reducer is built, so a mismatch reports itself and not as a
// failing collective later.
std::shared_ptr<dist::Communicator> checked(std::shared_ptr<dist::Communicator> comm, const torch::nn::Module& module) {
  DPT_CHECK(comm, ConfigError, "DistributedDataParallel needs a communicator; create one with "
                               "dpt::dist::init_process_group()");
  verify_replicas(*comm, describe_module(module), "DistributedDataParallel");
  return comm;
}

}  // namespace

std::vector<NamedParameter> DistributedDataParallelBase::trainable_parameters(const torch::nn::Module& module) {
  std::vector<NamedParameter> params;
  for (const auto& p : module.named_parameters(/*recurse=*/true)) {
    if (p.value().requires_grad()) params.push_back({p.key(), p.value()});
  }
  return params;
}

DistributedDataParallelBase::DistributedDataParallelBase(std::shared_ptr<torch::nn::Module> module,
                                                         std::shared_ptr<dist::Communicator> comm, DDPOptions options)
    : module_(std::move(module)),
      comm_(checked(std::move(comm), *module_)),
      options_(options),
      reducer_(trainable_parameters(*module_), comm_, options.reducer()),
      buffers_(module_->buffers()) {
  broadcast_state(/*root=*/0);
}

void DistributedDataParallelBase::broadcast_state(int root) {
  std::vector<at::Tensor> state = module_->parameters();
  state.insert(state.end(), buffers_.begin(), buffers_.end());
  broadcast_coalesced(*comm_, state, root);
}

void DistributedDataParallelBase::before_forward() {
  forward_start_ = std::chrono::steady_clock::now();
  Join* join = active_join();
  if (join != nullptr && !shadowing_ && torch::GradMode::is_enabled()) {
    DPT_CHECK(sync_, ConfigError, "rank ", comm_->rank(), ": no_sync() inside a Join: a finished rank cannot "
              "shadow steps that skip the reduction; accumulate outside the Join");
    join->announce_step();
  }
  if (options_.broadcast_buffers()) {
    // Inside a Join rank 0 may have finished; a rank still training holds the current buffers.
    broadcast_coalesced(*comm_, buffers_, /*root=*/join != nullptr ? join->authoritative_rank() : 0);
  }
  // Otherwise backward accumulates into .grad, wherever it lives; the next synchronized step
  // moves it into the buckets.
  if (sync_ && torch::GradMode::is_enabled()) reducer_.prepare_for_backward();
}

void DistributedDataParallelBase::broadcast_buffers() { broadcast_coalesced(*comm_, buffers_, /*root=*/0); }

void DistributedDataParallelBase::after_forward() {
  if (!reducer_.armed()) return;  // timing describes synchronized steps only
  forward_end_ = std::chrono::steady_clock::now();
  forward_ms_ = ms_between(forward_start_, forward_end_);
}

void DistributedDataParallelBase::shadow_step() {
  DPT_CHECK(shadow_forward_, ConfigError, "rank ", comm_->rank(), ": this rank finished before its first training "
            "step, so it cannot shadow the others' steps (it never saw a batch's shape); give every rank at least "
            "one batch");
  // Backward adds to .grad, and this rank's last step left its gradients there.
  for (auto& p : module_->parameters()) {
    if (p.grad().defined()) p.mutable_grad().zero_();
  }
  const torch::AutoGradMode grad_on(true);
  shadowing_ = true;
  try {
    // An empty batch's output sums to zero: every gradient it sends is zero.
    shadow_forward_().sum().backward();
  } catch (...) {
    shadowing_ = false;
    throw;
  }
  shadowing_ = false;
}

void DistributedDataParallelBase::take_final_state(int root) { broadcast_state(root); }

StepTiming DistributedDataParallelBase::last_timing() const {
  StepTiming timing;
  timing.forward_ms = forward_ms_;
  timing.backward_ms = ms_between(forward_end_, reducer_.last_finished_at());
  timing.comm_wait_ms = reducer_.last_comm_wait_ms();
  for (const auto& bucket : reducer_.last_reduction().buckets) {
    timing.bucket_launch_ms.push_back(ms_between(forward_end_, bucket.launched));
  }
  return timing;
}

}  // namespace dpt
