#pragma once
// SHA-256 (FIPS 180-4) and HMAC-SHA-256 (RFC 2104), for the job token's challenge and response:
// a process proves it holds the token without the token ever crossing the network.
//
//   std::string proof = dpt::hex(dpt::hmac_sha256(token, nonce + "|rank 3"));
//
// Also the checksums that make-shards writes in a shard set's manifest: plain portable code,
// about 170 MB/s a thread on a Zen 5 core, each shard hashed by the thread that writes it.

#include <array>
#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>

namespace dpt {

using Sha256Digest = std::array<std::uint8_t, 32>;

Sha256Digest sha256(std::string_view message);

Sha256Digest hmac_sha256(std::string_view key, std::string_view message);

// Lower-case hexadecimal, two digits a byte.
std::string hex(const std::uint8_t* bytes, size_t size);
inline std::string hex(const Sha256Digest& digest) { return hex(digest.data(), digest.size()); }

// Compares in time that does not depend on where the first difference is, so that timing a
// comparison does not reveal how much of a guessed proof was right.
bool equal_in_constant_time(std::string_view a, std::string_view b);

}  // namespace dpt
