#include "crc32c.h"

#include <array>

namespace dpt::train {
namespace {

// Byte-at-a-time table for the reflected Castagnoli polynomial 0x1EDC6F41. Log records are a few
// hundred bytes per step, so neither slicing tables nor the SSE4.2 instruction would be noticed.
constexpr uint32_t kReflectedPolynomial = 0x82F63B78u;

constexpr std::array<uint32_t, 256> make_table() {
  std::array<uint32_t, 256> table{};
  for (uint32_t byte = 0; byte < 256; ++byte) {
    uint32_t crc = byte;
    for (int bit = 0; bit < 8; ++bit) crc = (crc >> 1) ^ ((crc & 1u) ? kReflectedPolynomial : 0u);
    table[byte] = crc;
  }
  return table;
}

constexpr std::array<uint32_t, 256> kTable = make_table();

}  // namespace

uint32_t crc32c(std::string_view bytes, uint32_t crc) {
  crc = ~crc;
  for (const char c : bytes) crc = (crc >> 8) ^ kTable[(crc ^ static_cast<uint8_t>(c)) & 0xFFu];
  return ~crc;
}

}  // namespace dpt::train
