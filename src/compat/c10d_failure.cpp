#include "dptrain/compat/c10d_failure.h"

#include <c10/util/Exception.h>

namespace dpt::compat {

namespace {

bool mentions_any(const std::string& text, std::initializer_list<const char*> needles) {
  for (const char* needle : needles) {
    if (text.find(needle) != std::string::npos) return true;
  }
  return false;
}

}  // namespace

FailureCause failure_cause(const std::string& message) {
  // "Address already in use" (errno's text, both versions); "failed to listen on any local network
  // address" around it.
  if (mentions_any(message, {"already in use", "failed to listen", "EADDRINUSE"})) return FailureCause::AddressInUse;
  // "Timed out waiting 1000ms for recv operation" (Gloo), "Socket Timeout" (1.13's store), "has
  // timed out after 1000ms while trying to connect" (2.x's store), "Wait timeout" (stores' wait).
  if (mentions_any(message, {"imed out", "imeout"})) return FailureCause::Timeout;
  // Gloo's "Connection closed by peer [127.0.0.1]:port", "Connection reset by peer", a write to a
  // closed socket, a store whose host is gone.
  if (mentions_any(message, {"closed by peer", "reset by peer", "Broken pipe", "Connection refused", "ECONNRESET"})) {
    return FailureCause::PeerGone;
  }
  return FailureCause::Unknown;
}

FailureCause failure_cause(const std::exception& e) { return failure_cause(short_message(e)); }

std::string short_message(const std::exception& e) {
  std::string text = e.what();
  if (auto* c10_error = dynamic_cast<const c10::Error*>(&e)) text = c10_error->what_without_backtrace();
  auto newline = text.find('\n');
  return newline == std::string::npos ? text : text.substr(0, newline);
}

}  // namespace dpt::compat
