#include "dptrain/parallel/sync_batch_norm.h"

#include <utility>
#include <vector>

#include <ATen/core/ivalue.h>
#include <torch/csrc/autograd/custom_function.h>
#include <torch/nn/functional/batchnorm.h>

#include "dptrain/common/error.h"

namespace dpt {
namespace {

using torch::Tensor;
using torch::autograd::AutogradContext;
using torch::autograd::variable_list;

const char* const kInStep =
    ". In training mode every rank must run forward and backward of each SyncBatchNorm layer the same "
    "number of times, in the same order";

// Runs one collective, prefixing a failure with the SyncBatchNorm step it belongs to and keeping
// the error's type (a TimeoutError stays one).
template <typename Collective>
void run_collective(const std::string& what, Collective&& collective) {
  try {
    collective();
  } catch (const TimeoutError& e) {
    throw TimeoutError(str("SyncBatchNorm ", what, ": ", e.what(), kInStep));
  } catch (const DistError& e) {
    throw DistError(str("SyncBatchNorm ", what, ": ", e.what(), kInStep));
  }
}

// Dimensions the statistics run over: all but the channel dimension 1.
std::vector<int64_t> reduced_dims(const Tensor& x) {
  std::vector<int64_t> dims{0};
  for (int64_t d = 2; d < x.dim(); ++d) dims.push_back(d);
  return dims;
}

// A per-channel vector shaped [1, C, 1, ...] to broadcast against x.
Tensor per_channel(const Tensor& v, const Tensor& x) {
  std::vector<int64_t> shape(static_cast<size_t>(x.dim()), 1);
  shape[1] = -1;
  return v.view(shape);
}

// Half and bfloat16 cannot hold sums over a batch; they are normalised in float32.
at::ScalarType compute_type(const Tensor& x) {
  const auto type = x.scalar_type();
  return type == at::kHalf || type == at::kBFloat16 ? at::kFloat : type;
}

struct BatchStatistics {
  Tensor mean;          // per channel, over every rank's batch, in compute_type(x)
  Tensor invstd;        // 1 / sqrt(biased variance + eps)
  Tensor unbiased_var;  // what the running variance averages, as in BatchNorm
  int64_t count = 0;    // values per channel over all ranks
};

// One all_gather of [call, count, mean(C), M2(C)] from every rank (M2: the sum of squared
// deviations from the rank's own mean), combined with Chan et al.'s formula
// M2 = sum_r M2_r + sum_r n_r (mean_r - mean)^2. Unlike sums of squares this does not cancel
// catastrophically when |mean| >> std, and counts may differ by rank (zero included). The
// combination runs in double, as the CPU BatchNorm kernel accumulates.
BatchStatistics gather_statistics(const Tensor& x, double eps, dist::Communicator& comm, int64_t call) {
  const int64_t channels = x.size(1);
  const int64_t count = channels == 0 ? 0 : x.numel() / channels;
  // On the CPU whatever the input's device: the statistics are combined there, in double.
  const auto cpu_double = torch::TensorOptions().dtype(at::kDouble).device(at::kCPU);
  Tensor mean = torch::zeros({channels}, cpu_double), m2 = torch::zeros({channels}, cpu_double);
  if (count > 0) {
    auto [var, local_mean] = at::var_mean(x.to(compute_type(x)), reduced_dims(x), /*unbiased=*/false,
                                          /*keepdim=*/false);
    mean = local_mean.to(cpu_double);
    m2 = var.to(cpu_double) * static_cast<double>(count);
  }
  const auto header = torch::tensor({static_cast<double>(call), static_cast<double>(count)}, cpu_double);
  const auto local = torch::cat({header, mean, m2}).to(comm.device());
  std::vector<Tensor> parts;
  run_collective(str("forward (all_gather of the batch statistics, call ", call, ")"),
                 [&] { parts = comm.all_gather(local); });
  const auto all = torch::stack(parts).to(cpu_double);  // [world, 2 + 2C]

  for (int r = 0; r < comm.size(); ++r) {
    const auto other_call = all[r][0].item<int64_t>();
    DPT_CHECK(other_call == call, DistError, "rank ", comm.rank(), ": SyncBatchNorm forward out of step: this rank "
              "is at synchronised call ", call, " of this layer, rank ", r, " at call ", other_call, kInStep);
  }
  const auto counts = all.select(1, 1).unsqueeze(1);  // [world, 1]
  const double total = counts.sum().item<double>();
  DPT_CHECK(total > 1, ConfigError, "rank ", comm.rank(), ": SyncBatchNorm in training mode needs more than one "
            "value per channel over all ranks, got ", total, " (this rank's input has shape ", x.sizes(), ")");
  const auto means = all.slice(1, 2, 2 + channels);
  const auto global_mean = (means * counts).sum(0) / total;
  const auto global_m2 = all.slice(1, 2 + channels).sum(0) + (counts * (means - global_mean).pow(2)).sum(0);

  const auto to_x = torch::TensorOptions().dtype(compute_type(x)).device(x.device());
  BatchStatistics stats;
  stats.mean = global_mean.to(to_x);
  stats.invstd = (global_m2 / total + eps).rsqrt().to(to_x);
  stats.unbiased_var = (global_m2 / (total - 1)).to(to_x);
  stats.count = static_cast<int64_t>(total);
  return stats;
}

// Keeps the communicator alive in the autograd graph: saved_data holds IValues only.
struct CommunicatorCapsule : torch::CustomClassHolder {
  explicit CommunicatorCapsule(std::shared_ptr<dist::Communicator> c) : comm(std::move(c)) {}
  std::shared_ptr<dist::Communicator> comm;
};

// y = (x - mean) * invstd * weight + bias with the global statistics, whose dependence on x (on
// every rank) the backward accounts for: with x_hat the normalised input and sums over all ranks,
//   dx = weight * invstd * (dy - sum(dy) / N - x_hat * sum(dy * x_hat) / N)
// which is BatchNorm's gradient on the joined batch for the sum of all ranks' losses. Without
// affine parameters, weight and bias are ones and zeros that need no gradient (autograd functions
// take no undefined inputs).
class SyncBatchNormFunction : public torch::autograd::Function<SyncBatchNormFunction> {
 public:
  static Tensor forward(AutogradContext* ctx, const Tensor& input, const Tensor& weight, const Tensor& bias,
                        const Tensor& mean, const Tensor& invstd, int64_t count,
                        std::shared_ptr<dist::Communicator> comm) {
    ctx->save_for_backward({input, weight, mean, invstd});
    ctx->saved_data["count"] = count;
    ctx->saved_data["comm"] = c10::IValue::make_capsule(c10::make_intrusive<CommunicatorCapsule>(std::move(comm)));
    const auto x = input.to(mean.scalar_type());
    // The fused form of the CPU BatchNorm kernel: one scale and one shift per channel.
    const auto scale = invstd * weight;
    const auto shift = bias - mean * scale;
    return (x * per_channel(scale, x) + per_channel(shift, x)).to(input.scalar_type());
  }

  static variable_list backward(AutogradContext* ctx, variable_list grad_outputs) {
    const auto saved = ctx->get_saved_variables();
    const Tensor &input = saved[0], &weight = saved[1], &mean = saved[2], &invstd = saved[3];
    const auto count = static_cast<double>(ctx->saved_data["count"].toInt());
    auto& comm = *c10::static_intrusive_pointer_cast<CommunicatorCapsule>(ctx->saved_data["comm"].toCapsule())->comm;

    const auto x = input.to(mean.scalar_type());
    const auto dy = grad_outputs[0].to(mean.scalar_type());
    const auto dims = reduced_dims(x);
    const auto x_hat = (x - per_channel(mean, x)) * per_channel(invstd, x);
    const auto sum_dy = dy.sum(dims);
    const auto sum_dy_x_hat = (dy * x_hat).sum(dims);

    // Always reduced, even when no input gradient is wanted, so every rank's backward runs the
    // same collectives.
    auto global = torch::cat({sum_dy, sum_dy_x_hat}).to(comm.device());
    run_collective("backward (all_reduce of the gradient sums)",
                   [&] { comm.all_reduce(global, dist::ReduceOp::Sum); });
    global = global.to(x.device());

    Tensor grad_input, grad_weight, grad_bias;
    if (ctx->needs_input_grad(0)) {
      const int64_t channels = mean.size(0);
      const auto mean_dy = global.slice(0, 0, channels) / count;
      const auto mean_dy_x_hat = global.slice(0, channels) / count;
      const auto centred = dy - per_channel(mean_dy, x) - x_hat * per_channel(mean_dy_x_hat, x);
      grad_input = (centred * per_channel(invstd * weight, x)).to(input.scalar_type());
    }
    // The rank's own share: DistributedDataParallel averages these like any other gradient.
    if (ctx->needs_input_grad(1)) grad_weight = sum_dy_x_hat.to(weight.scalar_type());
    if (ctx->needs_input_grad(2)) grad_bias = sum_dy.to(weight.scalar_type());
    return {grad_input, grad_weight, grad_bias, Tensor(), Tensor(), Tensor(), Tensor()};
  }
};

}  // namespace

SyncBatchNormImpl::SyncBatchNormImpl(const SyncBatchNormOptions& options_, std::shared_ptr<dist::Communicator> comm)
    : NormImplBase(options_), comm_(std::move(comm)) {}

void SyncBatchNormImpl::_check_input_dim(const Tensor& input) {
  DPT_CHECK(input.dim() >= 2 && input.size(1) == options.num_features(), ConfigError,
            "SyncBatchNorm(", options.num_features(), ") expects input of shape [N, ", options.num_features(),
            ", ...], got ", input.sizes());
}

double SyncBatchNormImpl::count_batch() {
  // As torch::nn::BatchNorm2d: a fixed momentum, or with momentum unset the cumulative average.
  double factor = options.momentum().value_or(0.0);
  if (is_training() && options.track_running_stats() && num_batches_tracked.defined()) {
    num_batches_tracked += 1;
    if (!options.momentum()) factor = 1.0 / num_batches_tracked.item<double>();
  }
  return factor;
}

Tensor SyncBatchNormImpl::forward(const Tensor& input) {
  _check_input_dim(input);
  const double factor = count_batch();
  if (!is_training() || !comm_ || comm_->size() == 1) {
    return torch::nn::functional::detail::batch_norm(input, running_mean, running_var, weight, bias,
                                                     is_training() || !options.track_running_stats(), factor,
                                                     options.eps());
  }
  const auto stats = gather_statistics(input.detach(), options.eps(), *comm_, sync_calls_++);
  if (running_mean.defined()) {
    torch::NoGradGuard no_grad;
    running_mean.mul_(1 - factor).add_(stats.mean.to(running_mean.scalar_type()), factor);
    running_var.mul_(1 - factor).add_(stats.unbiased_var.to(running_var.scalar_type()), factor);
  }
  const auto affine_weight = weight.defined() ? weight : torch::ones_like(stats.mean);
  const auto affine_bias = bias.defined() ? bias : torch::zeros_like(stats.mean);
  return SyncBatchNormFunction::apply(input, affine_weight, affine_bias, stats.mean, stats.invstd, stats.count,
                                      comm_);
}

void SyncBatchNormImpl::pretty_print(std::ostream& stream) const {
  stream << "dpt::SyncBatchNorm(" << options.num_features() << ", eps=" << options.eps() << ", momentum=";
  if (options.momentum()) {
    stream << *options.momentum();
  } else {
    stream << "None";
  }
  stream << ", affine=" << std::boolalpha << options.affine()
         << ", track_running_stats=" << options.track_running_stats()
         << ", world_size=" << (comm_ ? comm_->size() : 1) << ")";
}

NormLayerFactory sync_batch_norm_factory(std::shared_ptr<dist::Communicator> comm,
                                          SyncBatchNormOptions options) {
  return [comm = std::move(comm), options](int64_t num_features) {
    auto layer = options;
    layer.num_features(num_features);
    return torch::nn::AnyModule(SyncBatchNorm(layer, comm));
  };
}

}  // namespace dpt
