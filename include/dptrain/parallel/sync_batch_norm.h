#pragma once
// SyncBatchNorm: batch normalisation whose training-mode statistics come from the batch of every
// rank together, as torch.nn.SyncBatchNorm. With per-rank batches of 8, a 16-rank job normalises
// over 128 samples per channel instead of 8.
//
//   auto comm = dpt::dist::init_process_group();
//   dpt::SyncBatchNorm bn(dpt::SyncBatchNormOptions(64).momentum(0.1), comm);
//   auto y = bn(x);                                       // [N, 64, H, W], N may differ by rank
//
//   // Every norm layer of a ResNet synchronised from the start (or convert an existing model
//   // with dpt::convert_sync_batchnorm, see convert_sync_batchnorm.h):
//   auto model = dpt::models::resnet50(
//       dpt::models::ResNetOptions().norm_layer(dpt::sync_batch_norm_factory(comm)));
//
// Parameters and buffers are those of torch::nn::BatchNorm2d (weight, bias, running_mean,
// running_var, num_batches_tracked), so state dicts map one to one in both directions.
//
// In training mode every forward is a collective (one all_gather of per-channel count, mean and
// squared deviations) and so is every backward through it (one all_reduce of the per-channel
// sums of dy and dy * x_hat). All ranks must therefore run forward, and backward, of each
// SyncBatchNorm layer the same number of times and in the same order, as with any collective; a
// rank that skips one leaves the others waiting until the communicator's timeout, which then
// fails with a TimeoutError. Forward calls out of step are detected (each rank sends its call
// count) and fail on every rank with a DistError.
//
// In eval mode, without a communicator, or in a world of one rank, the layer runs exactly the
// computation of torch::nn::BatchNorm2d and communicates nothing.
//
// Gradients: the input gradient is that of the sum of all ranks' losses (as PyTorch's), and the
// weight and bias gradients are the rank's own, so DistributedDataParallel's averaging makes
// training equal to BatchNorm on the joined batch. Inputs in float16/bfloat16 (autocast) are
// normalised with float32 statistics and returned in their own type. Works for CPU and CUDA
// tensors; the statistics travel on the communicator's device.

#include <cstdint>
#include <functional>
#include <memory>
#include <ostream>

#include <torch/nn/modules/batchnorm.h>
#include <torch/nn/modules/container/any.h>
#include <torch/nn/options/batchnorm.h>
#include <torch/nn/pimpl.h>

#include "dptrain/dist/communicator.h"
#include "dptrain/models/norm_layer_holder.h"

namespace dpt {

// num_features (required), eps = 1e-5, momentum = 0.1 (nullopt: cumulative average), affine =
// true, track_running_stats = true: the options of every LibTorch batch norm.
using SyncBatchNormOptions = torch::nn::BatchNormOptions;

// Inputs of any rank >= 2 ([N, C], [N, C, L], [N, C, H, W], ...) with C == num_features; the
// statistics are per channel, over all other dimensions and all ranks. The base class provides
// the parameters, buffers, options and reset() of LibTorch's batch norms (its dimension argument
// is unused).
class SyncBatchNormImpl : public torch::nn::NormImplBase<2, SyncBatchNormImpl, SyncBatchNormOptions> {
 public:
  // `comm` may be null: the layer then never synchronises (a single-process model).
  SyncBatchNormImpl(const SyncBatchNormOptions& options, std::shared_ptr<dist::Communicator> comm);

  torch::Tensor forward(const torch::Tensor& input);

  void pretty_print(std::ostream& stream) const override;

  const std::shared_ptr<dist::Communicator>& communicator() const { return comm_; }

 protected:
  void _check_input_dim(const torch::Tensor& input) override;

 private:
  // Counts the batch in num_batches_tracked when training, and returns the weight of this batch's
  // statistics in the running averages (torch::nn::BatchNorm2d's exponential_average_factor).
  double count_batch();

  std::shared_ptr<dist::Communicator> comm_;
  // Synchronised forwards so far; sent along with the statistics so that ranks out of step fail
  // loudly instead of mixing statistics of different layers or batches.
  int64_t sync_calls_ = 0;
};
TORCH_MODULE(SyncBatchNorm);

// A norm-layer factory with the signature of dpt::models::NormLayer: SyncBatchNorm over `comm`
// with `options` (whose num_features is replaced by the requested channel count).
NormLayerFactory sync_batch_norm_factory(
    std::shared_ptr<dist::Communicator> comm, SyncBatchNormOptions options = SyncBatchNormOptions(0));

}  // namespace dpt
