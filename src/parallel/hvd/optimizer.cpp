// DistributedOptimizer: the Horovod front end of the Reducer.

#include <algorithm>
#include <unordered_set>

#include "dptrain/common/error.h"
#include "dptrain/parallel/hvd/optimizer.h"
#include "dptrain/parallel/hvd/process.h"
#include "dptrain/parallel/replicas.h"

namespace dpt::hvd {

namespace {

constexpr double kMiB = 1024.0 * 1024.0;
// Horovod reduces whatever is ready every few milliseconds; small first and last buffers give
// the same early start (the last layers' gradients go out while backward continues) and a short
// tail once backward ends.
constexpr int64_t kEndBufferBytes = 1024 * 1024;

// The parameters `optimizer` trains, named and in `named_parameters`' order. Every one of them
// must have a name, as Horovod requires.
std::vector<NamedParameter> trained_parameters(const dist::Communicator& comm, const torch::optim::Optimizer& optimizer,
                                               const NamedTensors& named_parameters) {
  std::unordered_set<const void*> named, trained;
  for (const auto& item : named_parameters) named.insert(item.value().unsafeGetTensorImpl());
  const auto& groups = optimizer.param_groups();
  for (size_t g = 0; g < groups.size(); ++g) {
    for (size_t i = 0; i < groups[g].params().size(); ++i) {
      const at::Tensor& p = groups[g].params()[i];
      if (!p.requires_grad()) continue;
      DPT_CHECK(named.count(p.unsafeGetTensorImpl()), ConfigError, "rank ", comm.rank(),
                ": hvd::DistributedOptimizer: parameter ", i, " of param group ", g, " (shape ", p.sizes(),
                ") is not in named_parameters; pass the named_parameters() of the model the optimizer trains");
      trained.insert(p.unsafeGetTensorImpl());
    }
  }
  std::vector<NamedParameter> params;
  for (const auto& item : named_parameters) {
    if (trained.erase(item.value().unsafeGetTensorImpl())) params.push_back({item.key(), item.value()});
  }
  return params;
}

std::shared_ptr<dist::Communicator> checked(const DistributedOptimizerOptions& options,
                                            const std::shared_ptr<dist::Communicator>& comm,
                                            const torch::optim::Optimizer* optimizer) {
  DPT_CHECK(optimizer, ConfigError, "rank ", comm->rank(), ": hvd::DistributedOptimizer needs an optimizer");
  DPT_CHECK(options.backward_passes_per_step() >= 1, ConfigError, "rank ", comm->rank(),
            ": hvd::DistributedOptimizer: backward_passes_per_step must be at least 1, got ",
            options.backward_passes_per_step());
  DPT_CHECK(options.op() == ReduceOp::Average || options.op() == ReduceOp::Sum, ConfigError, "rank ", comm->rank(),
            ": hvd::DistributedOptimizer reduces gradients with Average or Sum, not ", to_string(options.op()));
  DPT_CHECK(options.fusion_threshold_bytes().value_or(0) >= 0, ConfigError, "rank ", comm->rank(),
            ": hvd::DistributedOptimizer: the fusion threshold must be 0 or more bytes, got ",
            options.fusion_threshold_bytes().value_or(0));
  return comm;
}

ReducerOptions reducer_options(const DistributedOptimizerOptions& options, int64_t context_threshold) {
  // A threshold of 0 (no fusion) becomes buffers of one byte: every tensor fills one alone.
  const int64_t cap = std::max<int64_t>(options.fusion_threshold_bytes().value_or(context_threshold), 1);
  return ReducerOptions()
      .bucket_cap_mb(static_cast<double>(cap) / kMiB)
      .first_bucket_cap_mb(static_cast<double>(std::min(cap, kEndBufferBytes)) / kMiB)
      .last_bucket_cap_mb(static_cast<double>(std::min(cap, kEndBufferBytes)) / kMiB)
      .find_unused_parameters(options.find_unused_parameters())
      .backward_passes(options.backward_passes_per_step());
}

CommHook hook_for(const DistributedOptimizerOptions& options) {
  const bool sum = options.op() == ReduceOp::Sum;
  if (options.compression() == Compression::Fp16) {
    return sum ? comm_hooks::fp16_compress_sum() : comm_hooks::fp16_compress();
  }
  return sum ? comm_hooks::allreduce_sum() : comm_hooks::allreduce_mean();
}

// The trained parameters, once every rank is known to have the same ones: models that differ
// would reduce buckets of different sizes, so say so before the reducer is built.
std::vector<NamedParameter> agreed_parameters(dist::Communicator& comm, const torch::optim::Optimizer& optimizer,
                                              const NamedTensors& named_parameters) {
  auto params = trained_parameters(comm, optimizer, named_parameters);
  std::vector<std::string> lines;
  for (const auto& p : params) {
    lines.push_back(str("parameter '", p.name, "' of shape ", p.tensor.sizes(), " and dtype ", p.tensor.scalar_type()));
  }
  verify_replicas(comm, lines, "hvd::DistributedOptimizer");
  return params;
}

}  // namespace

DistributedOptimizer::DistributedOptimizer(std::shared_ptr<torch::optim::Optimizer> optimizer,
                                           const NamedTensors& named_parameters, DistributedOptimizerOptions options)
    : DistributedOptimizer(*context(), std::move(optimizer), named_parameters, options) {}

DistributedOptimizer::DistributedOptimizer(const Context& context, std::shared_ptr<torch::optim::Optimizer> optimizer,
                                           const NamedTensors& named_parameters, DistributedOptimizerOptions options)
    : optimizer_(std::move(optimizer)),
      comm_(checked(options, context.communicator(), optimizer_.get())),
      options_(options),
      reducer_(agreed_parameters(*comm_, *optimizer_, named_parameters), comm_,
               reducer_options(options, context.fusion_threshold_bytes())) {
  reducer_.set_comm_hook(hook_for(options_));
  reducer_.prepare_for_backward();
}

void DistributedOptimizer::zero_grad() {
  const int passes = reducer_.accumulated_passes();
  DPT_CHECK(!reducer_.armed() || passes == 0, ConfigError, "rank ", comm_->rank(),
            ": hvd::DistributedOptimizer: zero_grad() after ", passes, " of ", options_.backward_passes_per_step(),
            " backward passes of this step would drop their gradients; call zero_grad() before the first backward "
            "pass of a step or after step()");
  optimizer_->zero_grad();
  reducer_.prepare_for_backward();
}

void DistributedOptimizer::synchronize() {
  if (!reducer_.armed()) return;
  const int k = options_.backward_passes_per_step();
  throw ConfigError(str("rank ", comm_->rank(), ": hvd::DistributedOptimizer: step() or synchronize() after ",
                        reducer_.accumulated_passes(), " of ", k, " backward pass", k == 1 ? "" : "es",
                        " since the last step; gradients are reduced during the last of those passes. Run "
                        "backward_passes_per_step (", k, ") backward passes before each step"));
}

void DistributedOptimizer::step() {
  synchronize();
  optimizer_->step();
  reducer_.prepare_for_backward();
}

}  // namespace dpt::hvd
