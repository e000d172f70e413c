#include "dptrain/dist/transport/process_group/transport.h"

#include <algorithm>

#include "dptrain/common/error.h"
#include "../completing_work.h"
#include "../served_queue.h"
#include "agreement.h"

namespace dpt::dist::transport::process_group {
namespace {

c10d::ReduceOp to_c10d(ReduceOp op, bool native_avg) {
  switch (op) {
    case ReduceOp::Sum: return c10d::ReduceOp::SUM;
    case ReduceOp::Mean: return native_avg ? c10d::ReduceOp::AVG : c10d::ReduceOp::SUM;
    case ReduceOp::Max: return c10d::ReduceOp::MAX;
    case ReduceOp::Min: return c10d::ReduceOp::MIN;
  }
  return c10d::ReduceOp::SUM;
}

}  // namespace

// Checked collectives, started one after another: the check, then the backend's call, whose
// completion completes the work handed out at once. A check only (start empty) completes at once.
class Transport::Starter {
 public:
  explicit Starter(Transport& transport)
      : transport_(transport), queue_([this](Start& start) { serve(start); }) {}

  compat::WorkPtr push(const CollectiveRecord& record, std::function<compat::WorkPtr()> start) {
    auto work = c10::make_intrusive<CompletingWork>();
    queue_.push(Start{record, std::move(start), work});
    return work;
  }

  // Returns once every collective pushed before has started.
  void drain(std::chrono::milliseconds timeout) {
    CollectiveRecord nothing_to_check;
    nothing_to_check.agreement_implied = true;
    push(nothing_to_check, nullptr)->wait(timeout);
  }

 private:
  struct Start {
    CollectiveRecord record;
    std::function<compat::WorkPtr()> call;
    c10::intrusive_ptr<CompletingWork> work;
  };

  void serve(Start& start) {
    try {
      transport_.check_now(start.record);
      if (!start.call) {
        start.work->complete(nullptr);
        return;
      }
      const compat::WorkPtr started = start.call();
      // Gloo's work reports through its future, from its own thread.
      started->getFuture()->addCallback([work = start.work](c10::ivalue::Future& done) {
        work->complete(done.hasError() ? done.exception_ptr() : nullptr);
      });
    } catch (...) {
      start.work->complete(std::current_exception());
    }
  }

  Transport& transport_;
  ServedQueue<Start> queue_;
};

Transport::Transport(compat::BackendPtr backend, const TransportOptions& options, std::string note, Starting starting)
    : backend_(std::move(backend)),
      timeout_(options.timeout()),
      check_agreement_(options.check_agreement() && detail::can_check_agreement(*backend_)),
      abandonment_(options.abandonment()),
      note_(std::move(note)) {
  if (check_agreement_ && starting == Starting::kOnItsThread) starter_ = std::make_unique<Starter>(*this);
  for (const auto type : {at::kHalf, at::kBFloat16}) {
    try {
      if (!compat::backend_reduces(*backend_, type)) through_float_.push_back(type);
    } catch (const std::exception& e) {
      throw DistError(str("rank ", backend_->getRank(), ": the group's first collective (a one-element all_reduce of ",
                          type, ", asking the backend which types it reduces) failed: ", e.what(),
                          ". Every rank of the job must start; look for one that did not, or that failed first"));
    }
  }
}

Transport::~Transport() {
  starter_.reset();  // starts what was asked for, before the backend shuts down
  compat::shutdown_backend(*backend_);
}

std::string Transport::describe() const {
  const std::string name = backend_->getBackendName();
  return note_.empty() ? name : name + " (" + note_ + ")";
}

bool Transport::reduces(at::ScalarType type) const {
  return std::find(through_float_.begin(), through_float_.end(), type) == through_float_.end();
}

bool Transport::scatters(const at::Tensor& /*like*/, ReduceOp op) const {
  return compat::backend_supports_reduce_scatter(*backend_) &&
         (op != ReduceOp::Mean || compat::backend_supports_avg(*backend_));
}

void Transport::check_now(const CollectiveRecord& record) {
  if (check_agreement_ && !record.agreement_implied) {
    detail::check_agreement(*backend_, record, timeout_, abandonment_.get());
  }
}

void Transport::check_agreement(const CollectiveRecord& record) {
  if (!starter_) return check_now(record);
  const compat::WorkPtr checked = starter_->push(record, nullptr);
  checked->wait(timeout_);  // the check bounds its own wait by the timeout
}

compat::WorkPtr Transport::checked(const CollectiveRecord& record, const at::Tensor& tensor,
                                   std::function<compat::WorkPtr()> start) {
  if (starter_ && tensor.is_cpu()) return starter_->push(record, std::move(start));
  // A GPU tensor through Gloo starts on the caller's thread, whose current CUDA stream Gloo's work
  // waits for (the starter's would be another), once the collectives asked for before it started.
  if (starter_) starter_->drain(timeout_);
  check_now(record);
  return start();
}

compat::WorkPtr Transport::all_reduce(at::Tensor tensor, ReduceOp op, const CollectiveRecord& record) {
  return checked(record, tensor, [this, tensor, op]() mutable {
    const bool native_avg = compat::backend_supports_avg(*backend_);
    // Gloo has no average: divide before the sum, here (on the starter thread, where there is one),
    // while DDP's backward is still producing gradients, rather than after it, when the reducer
    // waits for every bucket at once.
    // It is also where PyTorch's reducer divides, so DDP's gradients match it bit for bit.
    if (op == ReduceOp::Mean && !native_avg && backend_->getSize() > 1) tensor.div_(backend_->getSize());
    std::vector<at::Tensor> tensors{std::move(tensor)};
    c10d::AllreduceOptions options;
    options.reduceOp = to_c10d(op, native_avg);
    options.timeout = timeout_;
    return backend_->allreduce(tensors, options);
  });
}

compat::WorkPtr Transport::broadcast(at::Tensor tensor, int root, const CollectiveRecord& record) {
  return checked(record, tensor, [this, tensor, root]() mutable {
    std::vector<at::Tensor> tensors{std::move(tensor)};
    c10d::BroadcastOptions options;
    options.rootRank = root;
    options.timeout = timeout_;
    return backend_->broadcast(tensors, options);
  });
}

compat::WorkPtr Transport::all_gather(at::Tensor input, at::Tensor output, const CollectiveRecord& record) {
  return checked(record, input, [this, input, output]() mutable {
    // c10d's list form, into views of `output`: Gloo (and NCCL) copy each rank's part into them.
    const int64_t n = input.numel();
    std::vector<std::vector<at::Tensor>> outputs(1);
    for (int r = 0; r < backend_->getSize(); ++r) outputs[0].push_back(output.narrow(0, r * n, n).view(input.sizes()));
    std::vector<at::Tensor> inputs{std::move(input)};
    c10d::AllgatherOptions options;
    options.timeout = timeout_;
    return backend_->allgather(outputs, inputs, options);
  });
}

compat::WorkPtr Transport::reduce_scatter(at::Tensor input, at::Tensor output, ReduceOp op,
                                          const CollectiveRecord& record) {
  DPT_ASSERT(scatters(input, op), "reduce_scatter through ", describe(), ", which has none: ask scatters() first");
  return checked(record, input, [this, input, output, op]() mutable {
    std::vector<std::vector<at::Tensor>> inputs{input.split(input.size(0) / backend_->getSize(), 0)};
    std::vector<at::Tensor> outputs{output.view(inputs[0][0].sizes())};
    c10d::ReduceScatterOptions options;
    options.reduceOp = to_c10d(op, /*native_avg=*/true);
    options.timeout = timeout_;
    return backend_->reduce_scatter(outputs, inputs, options);
  });
}

compat::WorkPtr Transport::send(at::Tensor tensor, int peer, int tag) {
  std::vector<at::Tensor> tensors{std::move(tensor)};
  return backend_->send(tensors, peer, tag);
}

compat::WorkPtr Transport::recv(at::Tensor tensor, int peer, int tag) {
  std::vector<at::Tensor> tensors{std::move(tensor)};
  return backend_->recv(tensors, peer, tag);
}

}  // namespace dpt::dist::transport::process_group
