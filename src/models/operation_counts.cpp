#include "dptrain/models/operation_counts.h"

#include <cstring>
#include <memory>
#include <mutex>

#include "dptrain/common/error.h"

namespace dpt::models {
namespace {

// RecordFunction takes plain function pointers, and the operations run on any thread: the one
// tally, behind a lock (a counted step runs a few thousand operations).
struct OperationTally {
  std::mutex mutex;
  bool counting = false;
  std::map<std::string, int64_t> counts;
};

OperationTally& operation_tally() {
  static OperationTally instance;
  return instance;
}

std::unique_ptr<at::ObserverContext> count_operation(const at::RecordFunction& fn) {
  const char* name = fn.name();
  if (std::strncmp(name, "aten::", 6) != 0) return nullptr;
  auto& t = operation_tally();
  std::lock_guard<std::mutex> lock(t.mutex);
  if (t.counting) ++t.counts[name];
  return nullptr;
}

}  // namespace

OperationCounter::OperationCounter() {
  auto& t = operation_tally();
  {
    std::lock_guard<std::mutex> lock(t.mutex);
    DPT_ASSERT(!t.counting, "OperationCounter: counters do not nest");
    t.counting = true;
    t.counts.clear();
  }
  handle_ = at::addGlobalCallback(at::RecordFunctionCallback(count_operation).scopes({at::RecordScope::FUNCTION}));
}

OperationCounter::~OperationCounter() {
  at::removeCallback(handle_);
  auto& t = operation_tally();
  std::lock_guard<std::mutex> lock(t.mutex);
  t.counting = false;
}

std::map<std::string, int64_t> OperationCounter::counts() const {
  auto& t = operation_tally();
  std::lock_guard<std::mutex> lock(t.mutex);
  return t.counts;
}

}  // namespace dpt::models
