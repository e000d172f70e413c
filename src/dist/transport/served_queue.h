#pragma once
// A queue of a transport's operations served in order by one thread of its own (the shared-memory
// group's, each step of the hierarchical allreduce). stop() (and the destructor) lets the thread
// serve what is still queued, then joins it; an owner that must fail those fast says so to its
// `serve` first.

#include <condition_variable>
#include <deque>
#include <functional>
#include <mutex>
#include <thread>

namespace dpt::dist::transport {

template <typename Item>
class ServedQueue {
 public:
  explicit ServedQueue(std::function<void(Item&)> serve) : serve_(std::move(serve)), worker_([this] { run(); }) {}
  ~ServedQueue() { stop(); }
  ServedQueue(const ServedQueue&) = delete;
  ServedQueue& operator=(const ServedQueue&) = delete;

  void push(Item item) {
    {
      std::lock_guard<std::mutex> lock(mutex_);
      queue_.push_back(std::move(item));
    }
    queued_.notify_one();
  }

  // Serves what is queued, then ends the thread. Once.
  void stop() {
    {
      std::lock_guard<std::mutex> lock(mutex_);
      stopping_ = true;
    }
    queued_.notify_all();
    if (worker_.joinable()) worker_.join();
  }

 private:
  void run() {
    for (;;) {
      Item item;
      {
        std::unique_lock<std::mutex> lock(mutex_);
        queued_.wait(lock, [&] { return stopping_ || !queue_.empty(); });
        if (queue_.empty()) return;
        item = std::move(queue_.front());
        queue_.pop_front();
      }
      serve_(item);
    }
  }

  std::function<void(Item&)> serve_;
  std::mutex mutex_;
  std::condition_variable queued_;
  std::deque<Item> queue_;
  bool stopping_ = false;
  std::thread worker_;  // last: starts once everything above exists
};

}  // namespace dpt::dist::transport
