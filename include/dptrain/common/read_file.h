#pragma once
// A whole file in memory, for what dptrain reads at once: checkpoints and state dicts, encoded
// images, a run's report files, and /proc's files (which give their size as 0 until read):
//
//   const auto bytes = dpt::read_file<std::vector<char>>(path);
//   DPT_CHECK(bytes, CheckpointError, "cannot open checkpoint ", path, ": ", std::strerror(errno));
//
// The words of a failure are the caller's, who knows what the file was for: nullopt leaves errno
// as the failed open or read set it (ENOENT, EACCES, EISDIR for a folder).

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

namespace dpt {

// The bytes of `path`, or nullopt with errno set when it cannot be opened or read. Bytes is
// std::string, std::vector<char> or std::vector<uint8_t>. A std::filesystem::path converts; the
// string keeps the path's parsing off the loader's per-image reads.
template <class Bytes>
std::optional<Bytes> read_file(const std::string& path);

}  // namespace dpt
