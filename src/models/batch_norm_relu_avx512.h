#pragma once
// The row loops of batch_norm_relu_kernel.cpp in AVX-512 (F, BW, VL), chosen at run time: 16
// channels per instruction, a block of channels at a time down the rows of a chunk, so a
// block's sums and per-channel factors stay in registers. The compiler's own vectorization of
// the portable loops kept them in memory and spent most of its instructions packing bf16 in
// 256-bit halves: those loops took 3 to 6 times as long as copying the data. The same sums in
// the same order per channel as the portable loops, each product rounded before it is added as
// there (no fused multiply-add: rounded_product): the same bits, which
// BatchNormReLU.PortableAndAvx512LoopsAgreeToTheBit checks. Other CPUs (and architectures, where
// these are stubs) run the portable loops.
// Private to the models layer.

#include <cstdint>

#include "batch_norm_relu_kernel.h"
#include "bf16_avx512.h"

namespace dpt::models::kernel {

// A chunk's per-channel mean and sum of squared deviations from it.
void chunk_moments_avx512(const uint16_t* x, int64_t rows, int64_t channels, float* mean, float* m2);

void scale_shift_relu_rows_avx512(const uint16_t* x, const uint16_t* residual, const float* scale, const float* shift,
                                  int64_t rows, int64_t channels, uint16_t* y);

void chunk_grad_sums_avx512(const uint16_t* grad, const uint16_t* y, const uint16_t* x, const float* mean,
                            int64_t rows, int64_t channels, float* sum_grad, float* sum_grad_centred);

void input_grad_rows_avx512(const uint16_t* grad, const uint16_t* y, const uint16_t* x, const InputGradient& terms,
                            int64_t rows, int64_t channels, uint16_t* grad_x, uint16_t* grad_residual);

}  // namespace dpt::models::kernel
