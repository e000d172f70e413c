#pragma once
// Turning c10d and Gloo exceptions into dptrain errors that say which rank, which operation, the
// likely cause and what to do. Private to the dist layer.

#include <chrono>
#include <exception>
#include <string>

namespace dpt::dist::detail {

// Throws TimeoutError or DistError for `operation` on `rank` that failed with `cause`.
[[noreturn]] void throw_collective_failure(int rank, const std::string& operation, const std::exception& cause,
                                           std::chrono::milliseconds timeout);

}  // namespace dpt::dist::detail
