#include "dptrain/common/parallel_for.h"

#include <algorithm>
#include <atomic>
#include <exception>
#include <mutex>
#include <thread>
#include <vector>

namespace dpt {

void parallel_for(size_t count, int threads, const std::function<void(size_t)>& body) {
  std::atomic<size_t> next{0};
  std::mutex mutex;  // over the first failure
  std::exception_ptr failure;
  auto work = [&] {
    for (size_t i = next++; i < count; i = next++) {
      try {
        body(i);
      } catch (...) {
        std::lock_guard<std::mutex> lock(mutex);
        if (!failure) failure = std::current_exception();
        next = count;
        return;
      }
    }
  };
  std::vector<std::thread> helpers;
  const size_t wanted = std::min(static_cast<size_t>(std::max(threads, 1)), count);
  for (size_t t = 1; t < wanted; ++t) helpers.emplace_back(work);
  work();
  for (auto& helper : helpers) helper.join();
  if (failure) std::rethrow_exception(failure);
}

}  // namespace dpt
