#pragma once
// Turning c10d and Gloo exceptions into dptrain errors that say which rank, which operation, the
// likely cause and what to do. Private to the dist layer.
//
//   try { work->wait(timeout); }
//   catch (...) { detail::throw_collective_failure(rank, "all_reduce(sum)", std::current_exception(), timeout); }

#include <chrono>
#include <exception>
#include <string>

namespace dpt::dist::detail {

// Throws TimeoutError or DistError for `operation` on `rank` that failed with `cause`; a dptrain
// error (already explained) is rethrown as it is. `survey` (hang_survey.h) follows a timeout's text.
[[noreturn]] void throw_collective_failure(int rank, const std::string& operation, std::exception_ptr cause,
                                           std::chrono::milliseconds timeout, const std::string& survey = "");

// Whether `cause` is a backend's timeout that no dptrain message has explained yet (a transport
// that bounds its own waits names the peer it waited for itself).
bool is_unexplained_timeout(std::exception_ptr cause);

}  // namespace dpt::dist::detail
