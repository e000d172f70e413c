#include "replica_threads.h"

#include <ATen/Parallel.h>

#include "dptrain/common/error.h"

namespace dpt::detail {

// How each thread gets its own intra-op thread count. at::set_num_threads reads as process-wide,
// but with LibTorch's OpenMP backend (the one its builds use) its effect on the calling thread is
// thread-local: omp_set_num_threads sets that thread's own OpenMP control variable. It also stores
// the count in globals that every thread copies once, lazily, at its first parallel operation. So
// each replica thread first takes that lazy copy, then sets its own count; afterwards the
// constructor sets the caller's count again, which restores the globals and leaves the replica
// threads with theirs. The copy is taken through at::get_num_threads, which runs LibTorch's own
// at::internal::lazy_init_num_threads: since 2.x that inline function is not exported, so a call
// from here would set this library's copy of its thread_local flag, and LibTorch would still copy
// the globals later. data_parallel_test checks the outcome.
ReplicaThreads::ReplicaThreads(const std::vector<int>& intra_op_threads) : errors_(intra_op_threads.size()) {
  const int caller_threads = at::get_num_threads();
  pending_ = intra_op_threads.size();
  threads_.reserve(intra_op_threads.size());
  for (size_t k = 0; k < intra_op_threads.size(); ++k) {
    threads_.emplace_back(&ReplicaThreads::work, this, k, intra_op_threads[k]);
  }
  {
    std::unique_lock<std::mutex> lock(mutex_);
    done_.wait(lock, [this] { return pending_ == 0; });
  }
  at::set_num_threads(caller_threads);
}

ReplicaThreads::~ReplicaThreads() {
  {
    std::lock_guard<std::mutex> lock(mutex_);
    stopping_ = true;
  }
  wake_.notify_all();
  for (auto& t : threads_) t.join();
}

void ReplicaThreads::run(size_t count, const std::function<void(size_t)>& task) {
  const at::ThreadLocalState state;
  {
    std::lock_guard<std::mutex> lock(mutex_);
    DPT_ASSERT(count <= threads_.size(), "run on ", count, " of ", threads_.size(), " replica threads");
    DPT_ASSERT(task_ == nullptr, "ReplicaThreads::run called while another run is in progress");
    task_ = &task;
    state_ = &state;
    count_ = count;
    pending_ = count;
    ++generation_;
    std::fill(errors_.begin(), errors_.end(), nullptr);
  }
  wake_.notify_all();
  {
    std::unique_lock<std::mutex> lock(mutex_);
    done_.wait(lock, [this] { return pending_ == 0; });
    task_ = nullptr;
    state_ = nullptr;
  }
  for (const auto& error : errors_) {
    if (error) std::rethrow_exception(error);
  }
}

void ReplicaThreads::work(size_t index, int intra_op_threads) {
  if (intra_op_threads > 0) {
    (void)at::get_num_threads();  // LibTorch's own lazy initialisation, see above
    at::set_num_threads(intra_op_threads);
  }
  std::unique_lock<std::mutex> lock(mutex_);
  if (--pending_ == 0) done_.notify_all();
  uint64_t seen = 0;
  for (;;) {
    wake_.wait(lock, [&] { return stopping_ || generation_ != seen; });
    if (stopping_) return;
    seen = generation_;
    if (index >= count_) continue;
    lock.unlock();
    std::exception_ptr error;
    try {
      at::ThreadLocalStateGuard guard(*state_);
      (*task_)(index);
    } catch (...) {
      error = std::current_exception();
    }
    lock.lock();
    errors_[index] = error;
    if (--pending_ == 0) done_.notify_all();
  }
}

}  // namespace dpt::detail
