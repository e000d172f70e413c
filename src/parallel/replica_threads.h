#pragma once
// One long-lived thread per DataParallel replica. run(task) executes task(k) on thread k for every
// k at once, with the caller's thread-local state (grad mode, autocast), and returns when all are
// done, rethrowing the first failure (lowest k) with its original text.
//
//   ReplicaThreads threads({1, 1});          // two threads, one intra-op thread each
//   threads.run([&](size_t k) { outputs[k] = replicas[k]->forward(chunks[k]); });

#include <condition_variable>
#include <cstddef>
#include <cstdint>
#include <exception>
#include <functional>
#include <mutex>
#include <thread>
#include <vector>

#include <ATen/ThreadLocalState.h>

namespace dpt::detail {

class ReplicaThreads {
 public:
  // One thread per entry; entry k is the intra-op thread count thread k uses for its whole life,
  // or 0 to leave it as LibTorch sets it (CUDA replicas: the work runs on the device).
  explicit ReplicaThreads(const std::vector<int>& intra_op_threads);
  ~ReplicaThreads();  // joins every thread
  ReplicaThreads(const ReplicaThreads&) = delete;
  ReplicaThreads& operator=(const ReplicaThreads&) = delete;

  size_t size() const { return threads_.size(); }

  // Runs task(k) on threads 0..count-1 (count <= size()) and waits for all of them.
  void run(size_t count, const std::function<void(size_t)>& task);

 private:
  void work(size_t index, int intra_op_threads);

  std::mutex mutex_;
  std::condition_variable wake_, done_;
  std::vector<std::thread> threads_;
  const std::function<void(size_t)>* task_ = nullptr;
  const at::ThreadLocalState* state_ = nullptr;  // the caller's, during run()
  size_t count_ = 0;                // threads taking part in the current run
  uint64_t generation_ = 0;         // bumped by each run(); a thread works once per generation
  size_t pending_ = 0;              // threads still working (or still starting, before the first run)
  std::vector<std::exception_ptr> errors_;
  bool stopping_ = false;
};

}  // namespace dpt::detail
