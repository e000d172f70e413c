#include "dptrain/dist/transport/hierarchical/transport.h"

#include <algorithm>
#include <mutex>

#include "../completing_work.h"
#include "../served_queue.h"
#include "dptrain/common/error.h"

namespace dpt::dist::transport::hierarchical {
// The three steps as a pipeline, so that the link between machines never waits for shared memory:
// while the leaders all-reduce one operation across machines, the machine already reduces the
// next, and broadcasts the one before. Reductions and broadcasts go through two shared-memory
// groups of their own, each in the operations' order on every rank of the machine whenever the
// leader's step 2 ends. The leader starts each operation on one thread (step 1, then step 2's
// agreement check and launch) and finishes it on another (waits for step 2, starts step 3).
struct Transport::Steps {
  struct Operation {
    at::Tensor tensor;
    ReduceOp op = ReduceOp::Sum;  // Sum, Max or Min: a mean was divided before it was queued
    CollectiveRecord record;
    c10::intrusive_ptr<CompletingWork> work;
    compat::WorkPtr reduced;  // step 1's, where the machine runs several ranks
    compat::WorkPtr across;   // step 2's, on the leader
  };

  Steps(Groups groups, std::chrono::milliseconds timeout)
      : groups(std::move(groups)),
        timeout(timeout),
        finisher([this](Operation& operation) { finish(operation); }),
        starter([this](Operation& operation) { start(operation); }) {}

  // Started in order on every rank. An operation on memory that one still in flight uses waits for
  // it: its reduction must read what that one's broadcast writes.
  void enqueue(Operation operation) {
    const void* storage = operation.tensor.storage().data();
    std::lock_guard<std::mutex> lock(starting);  // the callers' threads (backward's, the loop's) in turn
    for (auto& [earlier, work] : in_flight) {
      if (earlier == storage && !work->isCompleted()) work->wait(machine_wait());
    }
    in_flight.erase(std::remove_if(in_flight.begin(), in_flight.end(),
                                   [](const auto& entry) { return entry.second->isCompleted(); }),
                    in_flight.end());
    in_flight.emplace_back(storage, operation.work);
    starter.push(std::move(operation));
  }

  void start(Operation& operation) {
    try {
      rethrow_if_broken();
      const int64_t step = operation.record.step;
      if (groups.reductions) {
        operation.reduced = groups.reductions->reduce(operation.tensor, operation.op, /*root=*/0, step);
      }
      if (groups.leaders) {
        // The leaders compare their records while their machines reduce.
        groups.leaders->check_agreement(operation.record);
        if (operation.reduced) operation.reduced->wait(machine_wait());
        CollectiveRecord checked = operation.record;
        checked.agreement_implied = true;
        operation.across = groups.leaders->all_reduce(operation.tensor, operation.op, checked);
      }
    } catch (...) {
      fail(operation, std::current_exception());
      return;
    }
    finisher.push(std::move(operation));
  }

  void finish(Operation& operation) {
    try {
      rethrow_if_broken();
      // A rank that does not lead learns here of a failed reduction (the leader in start()).
      if (operation.reduced) operation.reduced->wait(machine_wait());
      if (operation.across) operation.across->wait(timeout);
      if (!groups.broadcasts) {
        operation.work->complete(nullptr);
        return;
      }
      auto broadcast = groups.broadcasts->broadcast(operation.tensor, /*root=*/0, operation.record.step);
      auto work = operation.work;
      broadcast->getFuture()->addCallback([this, work](c10::ivalue::Future& done) {
        if (done.hasError()) {
          fail_with(done.exception_ptr());
          work->complete(done.exception_ptr());
        } else {
          work->complete(nullptr);
        }
      });
    } catch (...) {
      fail(operation, std::current_exception());
    }
  }

  // How long a shared-memory operation may take to fail, once started.
  std::chrono::milliseconds machine_wait() const { return timeout + shm::Allreduce::kFailureReportDelay; }
  void rethrow_if_broken() {
    std::lock_guard<std::mutex> lock(mutex);
    if (broken) std::rethrow_exception(broken);
  }
  void fail_with(std::exception_ptr failure) {
    std::lock_guard<std::mutex> lock(mutex);
    if (!broken) broken = failure;
  }
  void fail(Operation& operation, std::exception_ptr failure) {
    fail_with(failure);
    operation.work->complete(failure);
  }

  // The groups outlive the threads that use them, and the failure outlives the groups, whose
  // destruction fails what they still hold (the broadcasts' callbacks note it).
  std::mutex mutex;
  std::exception_ptr broken;  // the first failure: every later operation gets it
  const Groups groups;
  const std::chrono::milliseconds timeout;
  std::mutex starting;
  std::vector<std::pair<const void*, c10::intrusive_ptr<CompletingWork>>> in_flight;  // under `starting`
  ServedQueue<Operation> finisher;  // declared before the starter, so destroyed after it
  ServedQueue<Operation> starter;
};

Transport::Transport(std::string layout, int world_size, Groups groups, std::unique_ptr<process_group::Transport> job,
                     std::chrono::milliseconds timeout)
    : OverBackend(std::move(job)), world_size_(world_size), layout_(std::move(layout)) {
  DPT_ASSERT(groups.leaders || (groups.reductions && groups.broadcasts), "a rank alone on its machine leads it");
  steps_ = std::make_unique<Steps>(std::move(groups), timeout);
}

Transport::~Transport() = default;

std::string Transport::describe() const { return backend().describe() + " + hierarchical (" + layout_ + ")"; }

compat::WorkPtr Transport::all_reduce(at::Tensor tensor, ReduceOp op, const CollectiveRecord& record) {
  // What shared memory takes (the leaders' Gloo takes it too), on every rank alike.
  if (!shm::Allreduce::accepts(tensor, op)) return OverBackend::all_reduce(std::move(tensor), op, record);
  // Divided before the sum, on the calling thread, as the flat Gloo allreduce does (process_group/
  // transport.h): the same addends, so only the order of the sum differs.
  if (op == ReduceOp::Mean) {
    tensor.div_(world_size_);
    op = ReduceOp::Sum;
  }
  auto work = c10::make_intrusive<CompletingWork>();
  steps_->enqueue(Steps::Operation{std::move(tensor), op, record, work, compat::WorkPtr(), compat::WorkPtr()});
  return work;
}

}  // namespace dpt::dist::transport::hierarchical
