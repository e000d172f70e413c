#pragma once
// The per-image loops of max_pool_kernel.cpp in AVX-512 (F, BW, VL), chosen at run time: 4 x 16
// channels at once, in registers. The same scan, maxima, positions and sums as the portable
// loops. Other CPUs (and architectures, where these are stubs) run the portable loops. Private
// to the models layer.

#include <cstdint>

#include "max_pool_kernel.h"

namespace dpt::models::kernel {

void max_pool_image_avx512(const uint16_t* x, const PoolShape& shape, uint16_t* y, uint8_t* positions);

void max_pool_grad_image_avx512(const uint16_t* grad_y, const uint8_t* positions, const PoolShape& shape,
                                uint16_t* grad_x);

}  // namespace dpt::models::kernel
