#include "dptrain/dist/transport/hierarchical/transport.h"

#include <condition_variable>
#include <deque>
#include <mutex>
#include <thread>

#include "../completing_work.h"
#include "dptrain/common/error.h"

namespace dpt::dist::transport::hierarchical {

struct Transport::Steps {
  struct Operation {
    at::Tensor tensor;
    ReduceOp op;  // Sum, Max or Min: a mean was divided before it was queued
    CollectiveRecord record;
    c10::intrusive_ptr<CompletingWork> work;
  };

  Steps(shm::Allreduce* machine, process_group::Transport* leaders, std::chrono::milliseconds timeout)
      : machine(machine), leaders(leaders), timeout(timeout), worker([this] { serve(); }) {}

  ~Steps() {
    {
      std::lock_guard<std::mutex> lock(mutex);
      stopping = true;
    }
    queued.notify_all();
    worker.join();
  }

  void enqueue(Operation operation) {
    {
      std::lock_guard<std::mutex> lock(mutex);
      queue.push_back(std::move(operation));
    }
    queued.notify_one();
  }

  void serve() {
    for (;;) {
      Operation operation;
      {
        std::unique_lock<std::mutex> lock(mutex);
        queued.wait(lock, [&] { return stopping || !queue.empty(); });
        if (queue.empty()) return;
        operation = std::move(queue.front());
        queue.pop_front();
      }
      if (!broken) {
        try {
          run(operation);
        } catch (...) {
          broken = std::current_exception();
        }
      }
      operation.work->complete(broken);
    }
  }

  // The three steps. A rank that does not lead queues both of its shared-memory steps at once:
  // the machine's ranks take them in the same order whenever the leader's step 2 ends.
  void run(const Operation& operation) {
    const auto machine_wait = timeout + shm::Allreduce::kFailureReportDelay;
    const int64_t step = operation.record.step;
    compat::WorkPtr reduced;
    if (machine) reduced = machine->reduce(operation.tensor, operation.op, /*root=*/0, step);
    if (leaders) {
      if (reduced) reduced->wait(machine_wait);
      leaders->all_reduce(operation.tensor, operation.op, operation.record)->wait(timeout);
    }
    if (machine) machine->broadcast(operation.tensor, /*root=*/0, step)->wait(machine_wait);
  }

  shm::Allreduce* const machine;           // null where this rank is alone on its machine
  process_group::Transport* const leaders;  // null where this rank does not lead its machine
  const std::chrono::milliseconds timeout;

  std::mutex mutex;
  std::condition_variable queued;
  std::deque<Operation> queue;
  bool stopping = false;
  std::exception_ptr broken;  // the failure that ended the hierarchy; every later operation gets it
  std::thread worker;         // last: starts once everything above exists
};

Transport::Transport(std::string layout, int world_size, std::unique_ptr<shm::Allreduce> machine,
                     std::unique_ptr<process_group::Transport> leaders, std::unique_ptr<process_group::Transport> job,
                     std::chrono::milliseconds timeout)
    : world_size_(world_size),
      job_(std::move(job)),
      leaders_(std::move(leaders)),
      machine_(std::move(machine)),
      layout_(std::move(layout)),
      steps_(std::make_unique<Steps>(machine_.get(), leaders_.get(), timeout)) {
  DPT_ASSERT(machine_ || leaders_, "a rank alone on its machine leads it");
}

Transport::~Transport() = default;

std::string Transport::describe() const { return job_->describe() + " + hierarchical (" + layout_ + ")"; }

compat::WorkPtr Transport::all_reduce(at::Tensor tensor, ReduceOp op, const CollectiveRecord& record) {
  // What shared memory takes (the leaders' Gloo takes it too), on every rank alike.
  if (!shm::Allreduce::accepts(tensor, op)) return job_->all_reduce(std::move(tensor), op, record);
  // Divided before the sum, on the calling thread, as the flat Gloo allreduce does (process_group/
  // transport.h): the same addends, so only the order of the sum differs.
  if (op == ReduceOp::Mean) {
    tensor.div_(world_size_);
    op = ReduceOp::Sum;
  }
  auto work = c10::make_intrusive<CompletingWork>();
  steps_->enqueue(Steps::Operation{std::move(tensor), op, record, work});
  return work;
}

}  // namespace dpt::dist::transport::hierarchical
