#include "dptrain/dist/communicator.h"

#include <algorithm>
#include <mutex>
#include <vector>

#include <signal.h>

#include "dptrain/common/error.h"
#include "failure.h"
#include "hang_survey.h"

namespace dpt::dist {

std::string to_string(ReduceOp op) {
  switch (op) {
    case ReduceOp::Sum: return "sum";
    case ReduceOp::Mean: return "mean";
    case ReduceOp::Max: return "max";
    case ReduceOp::Min: return "min";
  }
  return "unknown";
}

Work::Work(compat::WorkPtr work, std::function<void()> finish, Communicator* comm, uint64_t id, std::string what,
           std::chrono::milliseconds timeout)
    : work_(std::move(work)),
      finish_(std::move(finish)),
      comm_(comm),
      id_(id),
      what_(std::move(what)),
      timeout_(timeout) {}

namespace {

// The first stamp wins: the backend's report, else the return from wait().
void stamp(std::atomic<Work::Clock::rep>& completed) {
  Work::Clock::rep unset = 0;
  completed.compare_exchange_strong(unset, Work::Clock::now().time_since_epoch().count());
}

}  // namespace

void Work::watch_completion() {
  compat::on_completion(work_, [completed = completed_] { stamp(*completed); });
}

void Work::wait() {
  if (!work_) return;
  auto work = std::move(work_);
  try {
    if (abandonable_) {
      comm_->abandonment_->wait(work, timeout_);
    } else {
      work->wait(timeout_);
    }
  } catch (...) {
    // The bound the user set: the wait's own may hold a transport's grace for its report on top.
    comm_->fail(id_, what_, std::current_exception(), comm_->timeout());
  }
  stamp(*completed_);
  comm_->recorder_.end(id_, CollectiveRecord::State::Completed);
  // Run once and let go: what the write-back holds (the caller's tensor) must not outlive the
  // wait, since a Work may be kept for its completion time after its tensor is given back.
  if (finish_) std::exchange(finish_, nullptr)();
}

namespace {

// A peer that exits closes its sockets, and Gloo's next write to one raises SIGPIPE, whose default
// action ended this process before Gloo could report which peer left (the unit test of a peer that
// exits died so, now and then). Python ignores SIGPIPE from its start, so PyTorch never meets it; a
// C++ program must. Only the default action is replaced: a handler the program set stays.
void survive_closed_sockets() {
  struct sigaction current {};
  if (sigaction(SIGPIPE, nullptr, &current) == 0 && current.sa_handler == SIG_DFL) signal(SIGPIPE, SIG_IGN);
}

}  // namespace

Communicator::Communicator(compat::BackendPtr backend, WorldInfo world, const CommunicatorOptions& options)
    : world_(std::move(world)),
      timeout_(options.timeout()),
      device_(options.device()),
      store_(options.store()),
      recorder_(options.flight_recorder_size()),
      failure_log_(options.failure_log()) {
  DPT_ASSERT(backend, "a communicator needs a backend");
  survive_closed_sockets();
  DPT_ASSERT(backend->getRank() == world_.rank && backend->getSize() == world_.world_size,
             "backend rank/size ", backend->getRank(), "/", backend->getSize(), " disagree with world ",
             world_.rank, "/", world_.world_size);
  transport_ = transport::make_transport(
      std::move(backend), world_,
      transport::TransportOptions(options.transport()).timeout(timeout_).store(store_).abandonment(abandonment_));
}

Communicator::~Communicator() = default;

std::string Communicator::backend_name() const { return transport_->backend_name(); }

std::string Communicator::transport() const { return transport_->describe(); }

Work Communicator::start(const std::string& operation, const std::string& what, const at::Tensor& described, int peer,
                         const Launch& launch, std::function<void()> finish) {
  CollectiveRecord record;
  const uint64_t id = recorder_.start(operation, described, peer, &record);
  compat::WorkPtr work;
  try {
    work = launch(record);
  } catch (...) {
    fail(id, what, std::current_exception(), timeout_);
  }
  // A transport that bounds its operations itself says which peer it waited for; a wait that
  // ended first would only say that it took too long.
  Work started(std::move(work), std::move(finish), this, id, what, timeout_ + transport_->failure_report_delay());
  // Gloo closes the pair of a send or receive whose wait times out ("Application timeout caused
  // pair closure"), so such a wait cannot be cut into the abandonment's slices: it waits whole,
  // bounded by the timeout (a peer that dies closes the pair, which ends it at once).
  started.abandonable_ = !record.point_to_point();
  if (!device_.is_cuda()) started.watch_completion();
  return started;
}

void Communicator::fail(uint64_t id, const std::string& what, std::exception_ptr cause,
                        std::chrono::milliseconds waited) {
  recorder_.end(id, CollectiveRecord::State::Failed);
  try {
    std::rethrow_exception(cause);
  } catch (const GroupAbandoned&) {
    throw;  // the group is left on purpose: nothing to survey, nothing for the user to do
  } catch (...) {
  }
  const std::optional<CollectiveRecord> record = recorder_.entry(id);
  std::string survey;
  if (record && !record->point_to_point() && detail::is_unexplained_timeout(cause)) {
    detail::SurveyOptions options;
    options.rank = rank();
    options.world_size = size();
    options.seq = record->seq;
    options.operation = what;
    options.grace = std::min(timeout_, std::chrono::milliseconds(5000));
    survey = detail::survey_ranks(store_, options);
  }
  if (failure_log_ != nullptr) {
    *failure_log_ << "rank " << rank() << ": its last collectives, oldest first (flight recorder):\n"
                  << recorder_.describe() << std::flush;
  }
  std::string named = what;
  if (record) {
    if (!record->label.empty()) named += " of " + record->label;
    named += str(record->point_to_point() ? " [point-to-point #" : " [collective #", record->seq,
                 record->step >= 0 ? str(", step ", record->step) : "", "]");
  }
  detail::throw_collective_failure(rank(), named, cause, waited, survey);
}

at::Tensor Communicator::wire_tensor(const at::Tensor& tensor) const {
  return transport_->reduces(tensor.scalar_type()) ? tensor.contiguous() : tensor.to(at::kFloat).contiguous();
}

namespace {

// `then` to run once the result is in `tensor`, with `tensor` written back from `wire` first where
// the two differ.
std::function<void()> write_back(const at::Tensor& tensor, const at::Tensor& wire, std::function<void()> then) {
  if (wire.is_same(tensor)) return then;
  return [tensor, wire, then = std::move(then)]() mutable {
    tensor.copy_(wire);
    if (then) then();
  };
}

}  // namespace

Work Communicator::start_all_reduce(at::Tensor tensor, ReduceOp op, std::function<void()> then) {
  const std::string what = "all_reduce(" + to_string(op) + ")";
  DPT_CHECK(op != ReduceOp::Mean || at::isFloatingType(tensor.scalar_type()), ConfigError, "rank ", rank(),
            ": ", what, " with mean needs a floating-point tensor, got ", tensor.scalar_type());
  at::Tensor wire = wire_tensor(tensor);
  return start(
      what, what, tensor, /*peer=*/-1,
      [&](const CollectiveRecord& record) { return transport_->all_reduce(wire, op, record); },
      write_back(tensor, wire, std::move(then)));
}

void Communicator::all_reduce(at::Tensor& tensor, ReduceOp op) { start_all_reduce(tensor, op).wait(); }

Work Communicator::all_reduce_async(at::Tensor tensor, ReduceOp op) { return start_all_reduce(std::move(tensor), op); }

Work Communicator::broadcast_async(at::Tensor tensor, int root) {
  DPT_CHECK(root >= 0 && root < size(), ConfigError, "rank ", rank(), ": broadcast from rank ", root,
            ", which is outside the world of ", size());
  at::Tensor wire = wire_tensor(tensor);
  return start(
      "broadcast", "broadcast", tensor, /*peer=*/-1,
      [&](const CollectiveRecord& record) { return transport_->broadcast(wire, root, record); },
      write_back(tensor, wire, nullptr));
}

void Communicator::broadcast(at::Tensor& tensor, int root) { broadcast_async(tensor, root).wait(); }

Work Communicator::start_point_to_point(PointToPoint direction, at::Tensor tensor, int peer, int tag) {
  const bool receives = direction == PointToPoint::Recv;
  const std::string operation = receives ? "recv" : "send";
  const std::string what = str(operation, receives ? " from rank " : " to rank ", peer, " (tag ", tag, ")");
  DPT_CHECK(peer >= 0 && peer < size() && peer != rank(), ConfigError, "rank ", rank(), ": ", what,
            ": the peer must be another rank of the world of ", size());
  DPT_CHECK(tensor.is_contiguous(), ConfigError, "rank ", rank(), ": ", what, " needs a contiguous tensor");
  return start(operation, what, tensor, peer, [&](const CollectiveRecord& /*record*/) {
    return receives ? transport_->recv(tensor, peer, tag) : transport_->send(tensor, peer, tag);
  });
}

Work Communicator::send_async(at::Tensor tensor, int peer, int tag) {
  return start_point_to_point(PointToPoint::Send, std::move(tensor), peer, tag);
}

Work Communicator::recv_async(at::Tensor tensor, int peer, int tag) {
  return start_point_to_point(PointToPoint::Recv, std::move(tensor), peer, tag);
}

void Communicator::send(const at::Tensor& tensor, int peer, int tag) { send_async(tensor, peer, tag).wait(); }

void Communicator::recv(at::Tensor& tensor, int peer, int tag) { recv_async(tensor, peer, tag).wait(); }

std::vector<at::Tensor> Communicator::all_gather(const at::Tensor& tensor) {
  const at::Tensor wire = wire_tensor(tensor);
  const int64_t n = wire.numel();
  at::Tensor slots = at::empty({size() * n}, wire.options().memory_format(at::MemoryFormat::Contiguous));
  start(
      "all_gather", "all_gather", tensor, /*peer=*/-1,
      [&](const CollectiveRecord& record) { return transport_->all_gather(wire, slots, record); }, nullptr)
      .wait();
  if (wire.scalar_type() != tensor.scalar_type()) slots = slots.to(tensor.scalar_type());
  std::vector<at::Tensor> parts;
  for (int r = 0; r < size(); ++r) parts.push_back(slots.narrow(0, r * n, n).view(tensor.sizes()));
  return parts;
}

at::Tensor Communicator::reduce_scatter(const at::Tensor& tensor, ReduceOp op) {
  DPT_CHECK(tensor.dim() >= 1 && tensor.size(0) % size() == 0, ConfigError, "rank ", rank(),
            ": reduce_scatter needs dim 0 divisible by the world size ", size(), ", got shape ", tensor.sizes());
  std::vector<int64_t> shape = tensor.sizes().vec();
  shape[0] /= size();
  at::Tensor output = at::empty(shape, tensor.options().memory_format(at::MemoryFormat::Contiguous));
  // The caller's tensor stays as it was: a copy where the reduction runs in place.
  at::Tensor input = tensor.contiguous();
  if (!transport_->scatters(input, op) && input.is_same(tensor)) input = input.clone();
  reduce_scatter_async(input, output, op).wait();
  return output;
}

Work Communicator::reduce_scatter_async(at::Tensor tensor, at::Tensor output, ReduceOp op) {
  DPT_CHECK(tensor.dim() >= 1 && tensor.size(0) % size() == 0 && tensor.is_contiguous() && output.is_contiguous() &&
                output.numel() * size() == tensor.numel(),
            ConfigError, "rank ", rank(), ": reduce_scatter needs a contiguous tensor whose dim 0 the world size ",
            size(), " divides, and a contiguous output of its slice's size; got shapes ", tensor.sizes(), " and ",
            output.sizes());
  const int64_t rows = tensor.size(0) / size();
  if (!transport_->scatters(tensor, op)) {
    // Reduce everything in place, keep our slice: twice the traffic of a true reduce_scatter.
    const int64_t first = rank() * rows;
    return start_all_reduce(tensor, op, [tensor, output, first, rows]() mutable {
      output.copy_(tensor.narrow(0, first, rows).view(output.sizes()));
    });
  }
  return start("reduce_scatter", "reduce_scatter", tensor, /*peer=*/-1, [&](const CollectiveRecord& record) {
    return transport_->reduce_scatter(tensor, output, op, record);
  });
}

void Communicator::barrier() {
  // A one-element sum that every rank must join, rather than the backend's barrier: Gloo's waits
  // for this rank's earlier operations too, and rethrows the failure of one its worker thread had
  // not yet let go of (1.13's refusal of the bfloat16 type probe in the constructor, raised now and
  // then at a job's first barrier). An integer, which shared memory passes on to the backend, so
  // that the agreement check compares it by name: a float would pair silently there with another
  // rank's one-element sum.
  at::Tensor token = at::zeros({1}, at::TensorOptions().dtype(at::kLong).device(device_));
  start("barrier", "barrier", at::Tensor(), /*peer=*/-1, [&](const CollectiveRecord& record) {
    return transport_->all_reduce(token, ReduceOp::Sum, record);
  }).wait();
  // NCCL's wait holds back only the GPU's stream; the host is through the barrier once it reads.
  if (device_.is_cuda()) token.item<int64_t>();
}

at::Tensor Communicator::reduce_value(const at::Tensor& value, bool average) {
  at::Tensor reduced = value.detach().clone();
  all_reduce(reduced, average ? ReduceOp::Mean : ReduceOp::Sum);
  return reduced;
}

double Communicator::reduce_value(double value, bool average) {
  return reduce_value(at::full({1}, value, at::TensorOptions().dtype(at::kDouble).device(device_)), average).item<double>();
}

void retire(std::shared_ptr<Communicator> group) {
  // Leaked on purpose, with what it holds: see communicator.h.
  static auto* retired = new std::vector<std::shared_ptr<Communicator>>();
  static std::mutex mutex;
  std::lock_guard<std::mutex> lock(mutex);
  retired->push_back(std::move(group));
}

}  // namespace dpt::dist
