#pragma once
// The loops of the fused batch norm + ReLU (batch_norm_relu.h), on bf16 activations laid out as
// `rows` x `channels` (a channels_last NCHW tensor: rows = N*H*W) and float per-channel values.
// bf16 values travel as their 16 bits. Every sum over rows is taken in fixed chunks of rows and the
// chunks combined in one order, in double, so results do not depend on the number of threads.

#include <cstdint>

namespace dpt::models::kernel {

// Each channel's mean and biased variance over the rows (Chan's pairwise combination of the
// chunks' centred moments: exact for data far from zero, where sum and sum of squares cancel).
void channel_moments(const uint16_t* x, int64_t rows, int64_t channels, double* mean, double* variance);

// y = relu(x * scale + shift [+ residual]), rounded to bf16 once.
void scale_shift_relu(const uint16_t* x, const uint16_t* residual, const float* scale, const float* shift,
                      int64_t rows, int64_t channels, uint16_t* y);

// The two sums batch norm's backward needs, with ReLU's backward folded in (the gradient passes
// where the output y is positive): sum_grad = sum(g), sum_grad_centred = sum(g * (x - mean)).
void relu_grad_sums(const uint16_t* grad, const uint16_t* y, const uint16_t* x, const float* mean, int64_t rows,
                    int64_t channels, double* sum_grad, double* sum_grad_centred);

// Per channel, the input gradient is a * (g - b - (x - mean) * c) with g ReLU's gradient; it is
// written to `grad_x`, and g itself to `grad_residual` when that is not null.
struct InputGradient {
  const float* mean;
  const float* a;  // invstd * weight
  const float* b;  // sum_grad / rows
  const float* c;  // sum_grad_centred * invstd^2 / rows
};
void relu_norm_input_grad(const uint16_t* grad, const uint16_t* y, const uint16_t* x, const InputGradient& terms,
                          int64_t rows, int64_t channels, uint16_t* grad_x, uint16_t* grad_residual);

// The row loops the four above run on a CPU without AVX-512, on one chunk of rows (each sum in
// float over the chunk's rows, in order), declared for the test that holds
// batch_norm_relu_avx512.h's loops to them bit for bit. Their definitions are cloned for AVX2 and
// the baseline (the clone is picked when the library loads), which a declaration must not repeat:
// a caller that saw the attribute would build a dispatcher of its own, to clones it cannot reach.
void chunk_moments_portable(const uint16_t* x, int64_t rows, int64_t channels, float* mean, float* m2);
void scale_shift_relu_rows_portable(const uint16_t* x, const uint16_t* residual, const float* scale,
                                    const float* shift, int64_t rows, int64_t channels, uint16_t* y);
void chunk_grad_sums_portable(const uint16_t* grad, const uint16_t* y, const uint16_t* x, const float* mean,
                              int64_t rows, int64_t channels, float* sum_grad, float* sum_grad_centred);
void input_grad_rows_portable(const uint16_t* grad, const uint16_t* y, const uint16_t* x, const InputGradient& terms,
                              int64_t rows, int64_t channels, uint16_t* grad_x, uint16_t* grad_residual);

}  // namespace dpt::models::kernel
