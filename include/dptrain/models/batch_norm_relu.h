#pragma once
// relu(norm(x)) and relu(norm(x) + residual), the joints of every ResNet block, in one pass over
// memory each way where that pays: a BatchNorm2d in training on bf16 channels_last activations
// on the CPU (the step of `--amp --channels-last`):
//
//   x = dpt::models::norm_relu(bn1_, conv1_(x));
//   return dpt::models::norm_add_relu(norm_, out, shortcut);
//
// LibTorch makes three passes forward (batch norm's statistics, its output, ReLU's; with the
// residual an addition between) and three back (ReLU's, batch norm's sums, its input gradient),
// allocating a tensor for each. The fused forward reads x for the statistics chunk by chunk (the
// second, centred pass hits the cache) and writes y once; the backward reads the gradient, y and
// x for the sums and once more to write the input gradient. On one core this takes ResNet-18's
// bf16 step at 128 px, batch 32, from 693 to 668 ms (docs/benchmarks.md, "In mixed precision").
//
// What it computes is batch norm's definition, ReLU after (the residual added before the ReLU):
// the statistics in double, the rest in float, y rounded to bf16 once; running statistics,
// num_batches_tracked and the gradients of x, the residual, weight and bias as BatchNorm2d and
// ReLU give them (double backward is not supported). Any other case (eval mode, another norm
// layer such as SyncBatchNorm, float32 or NCHW activations, a GPU) runs the layers as they are,
// adding the residual and applying ReLU in place on the norm's output, as torchvision's blocks
// do: a norm layer's backward needs its input, not its output, and no new tensor is allocated.

#include <torch/nn/modules/container/any.h>
#include <torch/types.h>

namespace dpt::models {

torch::Tensor norm_relu(torch::nn::AnyModule& norm, const torch::Tensor& x);

torch::Tensor norm_add_relu(torch::nn::AnyModule& norm, const torch::Tensor& x, const torch::Tensor& residual);

}  // namespace dpt::models
