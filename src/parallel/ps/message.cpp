#include "message.h"

#include "dptrain/common/error.h"

namespace dpt::ps::wire {

void wait(const compat::WorkPtr& work, std::chrono::milliseconds timeout, const std::string& what) {
  try {
    work->wait(timeout);
  } catch (const std::exception& e) {
    throw DistError(str(what, " failed: ", e.what()));
  }
}

}  // namespace dpt::ps::wire
