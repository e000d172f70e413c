#include "failure.h"

#include "dptrain/common/error.h"
#include "dptrain/compat/c10d_failure.h"

namespace dpt::dist::detail {

void throw_collective_failure(int rank, const std::string& operation, std::exception_ptr cause,
                              std::chrono::milliseconds timeout, const std::string& survey) {
  const std::string head = str("rank ", rank, ": ", operation, " failed");
  std::string text;
  try {
    std::rethrow_exception(cause);
  } catch (const TimeoutError& e) {
    // A transport's own timeout names the peer; add which collective it was.
    throw TimeoutError(str(e.what(), " (in ", operation, ")"));
  } catch (const Error&) {
    throw;  // `cause` itself: already ours, already explained
  } catch (const std::exception& e) {
    text = compat::short_message(e);
  } catch (...) {
    throw DistError(str(head, " with an exception that is not a std::exception"));
  }
  const compat::FailureCause kind = compat::failure_cause(text);
  if (kind == compat::FailureCause::Timeout) {
    throw TimeoutError(str(head, ": it did not complete within ", timeout.count() / 1000.0,
                           " s.", survey.empty() ? " A peer is stuck, much slower, or gone; check the other ranks' output." : survey,
                           " (", text, ")"));
  }
  if (kind == compat::FailureCause::PeerGone) {
    throw DistError(str(head, ": a peer closed its connection, so another rank has probably exited or "
                              "crashed; its own output says why. (",
                        text, ")"));
  }
  throw DistError(str(head, ": ", text));
}

bool is_unexplained_timeout(std::exception_ptr cause) {
  try {
    std::rethrow_exception(cause);
  } catch (const Error&) {
    return false;
  } catch (const std::exception& e) {
    return compat::failure_cause(compat::short_message(e)) == compat::FailureCause::Timeout;
  } catch (...) {
    return false;
  }
}

}  // namespace dpt::dist::detail
