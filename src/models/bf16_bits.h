#pragma once
// bf16 values as their 16 bits, for the models layer's fused CPU loops (batch_norm_relu_kernel.cpp,
// max_pool_kernel.cpp): widening to float is exact; narrowing rounds as c10::BFloat16 does.
// Private to the models layer.

#include <cstdint>
#include <cstring>

#include <ATen/core/Tensor.h>

namespace dpt::models::kernel {

inline float bf16_to_float(uint16_t value) {
  const uint32_t bits = static_cast<uint32_t>(value) << 16;
  float result;
  std::memcpy(&result, &bits, sizeof(result));
  return result;
}

// Round to nearest, ties to even, as c10::BFloat16 rounds; NaN stays a (quiet) NaN.
inline uint16_t float_to_bf16(float value) {
  uint32_t bits;
  std::memcpy(&bits, &value, sizeof(bits));
  const uint32_t rounded = (bits + 0x7fffu + ((bits >> 16) & 1u)) >> 16;
  return value != value ? uint16_t{0x7fc0} : static_cast<uint16_t>(rounded);
}

// The bf16 that `value` was widened from, unrounded: its upper half, a NaN's payload included.
inline uint16_t bf16_of_widened(float value) {
  uint32_t bits;
  std::memcpy(&bits, &value, sizeof(bits));
  return static_cast<uint16_t>(bits >> 16);
}

// What the fused CPU layers take: bf16 images on the CPU, laid out channels_last (each pixel's
// channels next to each other).
inline bool is_bf16_channels_last_cpu(const at::Tensor& t) {
  return t.device().is_cpu() && t.scalar_type() == at::kBFloat16 && t.dim() == 4 &&
         t.is_contiguous(at::MemoryFormat::ChannelsLast);
}

// A bf16 tensor's values as their bits.
inline const uint16_t* bf16_bits(const at::Tensor& t) {
  return reinterpret_cast<const uint16_t*>(t.data_ptr<at::BFloat16>());
}
inline uint16_t* mutable_bf16_bits(at::Tensor& t) { return reinterpret_cast<uint16_t*>(t.data_ptr<at::BFloat16>()); }

}  // namespace dpt::models::kernel
