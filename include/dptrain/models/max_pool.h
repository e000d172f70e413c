#pragma once
// torch::max_pool2d (dilation 1, no ceil mode) in one pass over memory each way where that pays:
// bf16 channels_last images on the CPU (ResNet's stem under `--amp --channels-last`):
//
//   x = dpt::models::max_pool(x, /*kernel_size=*/{3, 3}, /*stride=*/{2, 2}, /*padding=*/{1, 1});
//
// LibTorch's forward writes the maxima and, beside each, its position as an int64: four times the
// bytes of the bf16 input it pools. Its backward fills the input gradient with zeros, then adds
// each output gradient at its position, reading back what it wrote. This one keeps each
// position as one byte (where in its window the maximum lies), and its backward gathers: each
// input value sums, in float, the gradients of the windows that chose it, and is written once,
// rounded once. On one core, ResNet's stem pool at 128 px, batch 32 (64 channels of 64 x 64),
// forward and backward: 6.4 ms against LibTorch's 11 to 17 ms (docs/benchmarks.md).
//
// What it computes is max pooling's definition: each window's maximum, scanned row by row and a
// value taking the maximum's place when greater or NaN (LibTorch's rule, so ties and NaN go where
// LibTorch sends them), and the gradient of each output added at its maximum. Any other case
// (float32 or NCHW images, a GPU, double backward) runs torch::max_pool2d.

#include <torch/types.h>

namespace dpt::models {

torch::Tensor max_pool(const torch::Tensor& x, torch::IntArrayRef kernel_size, torch::IntArrayRef stride,
                         torch::IntArrayRef padding);

}  // namespace dpt::models
