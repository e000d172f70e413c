#pragma once
// CRC-32C (Castagnoli): the checksum TFRecord files, and so TensorBoard event files, carry.
//
//   uint32_t crc = dpt::train::crc32c("123456789");   // 0xE3069283
//   crc = dpt::train::crc32c(more_bytes, crc);        // continue over a second piece

#include <cstdint>
#include <string_view>

namespace dpt::train {

// The CRC-32C of `bytes`, continuing from `crc` (the value over the bytes before them; 0 to start).
uint32_t crc32c(std::string_view bytes, uint32_t crc = 0);

}  // namespace dpt::train
