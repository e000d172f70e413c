#pragma once
// A c10d::Work that a transport's own thread completes (shared memory, the hierarchical
// allreduce). Its future tells watchers (the timeline's bucket spans) when, as Gloo's work does.

#include <exception>

#include "dptrain/compat/compat.h"

namespace dpt::dist::transport {

class CompletingWork : public c10d::Work {
 public:
  // Once, from the thread that ran the operation: null for success, else what failed it.
  void complete(std::exception_ptr failure) {
    if (failure) {
      future_->setError(failure);
    } else {
      future_->markCompleted(c10::IValue());
    }
    finish(std::move(failure));
  }
  c10::intrusive_ptr<c10::ivalue::Future> getFuture() override { return future_; }

 private:
  c10::intrusive_ptr<c10::ivalue::Future> future_ = c10::make_intrusive<c10::ivalue::Future>(c10::NoneType::get());
};

}  // namespace dpt::dist::transport
