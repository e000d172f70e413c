#include "failure.h"

#include <c10/util/Exception.h>

#include "dptrain/common/error.h"

namespace dpt::dist::detail {

std::string short_message(const std::exception& e) {
  std::string text = e.what();
  if (auto* c10_error = dynamic_cast<const c10::Error*>(&e)) text = c10_error->what_without_backtrace();
  auto newline = text.find('\n');
  return newline == std::string::npos ? text : text.substr(0, newline);
}

void throw_collective_failure(int rank, const std::string& operation, const std::exception& cause,
                              std::chrono::milliseconds timeout) {
  if (dynamic_cast<const Error*>(&cause) != nullptr) throw;  // already ours, already explained
  const std::string text = short_message(cause);
  const std::string head = str("rank ", rank, ": ", operation, " failed");
  if (mentions(text, "imed out") || mentions(text, "imeout")) {
    throw TimeoutError(str(head, ": it did not complete within ", timeout.count() / 1000.0,
                           " s. A peer is stuck, much slower, or gone; check the other ranks' output. (",
                           text, ")"));
  }
  if (mentions(text, "closed by peer") || mentions(text, "reset by peer") || mentions(text, "Broken pipe") ||
      mentions(text, "Connection refused") || mentions(text, "ECONNRESET")) {
    throw DistError(str(head, ": a peer closed its connection, so another rank has probably exited or "
                              "crashed; its own output says why. (",
                        text, ")"));
  }
  throw DistError(str(head, ": ", text));
}

}  // namespace dpt::dist::detail
