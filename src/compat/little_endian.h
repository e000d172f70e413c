#pragma once
// Unsigned integers as the zip and pickle formats store them: least significant byte first.
// Private to the compat layer (zip_directory.cpp, pickle.cpp).

#include <cstdint>

namespace dpt::compat {

// The `bytes`-byte (at most 8) little-endian integer at `at`.
inline uint64_t little_endian(const uint8_t* at, int bytes) {
  uint64_t value = 0;
  for (int i = bytes - 1; i >= 0; --i) value = value << 8 | at[i];
  return value;
}

}  // namespace dpt::compat
