#include "dptrain/dist/communicator.h"

#include <algorithm>

#include <signal.h>

#include "dptrain/common/error.h"
#include "agreement.h"
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
    work->wait(timeout_);
  } catch (...) {
    comm_->fail(id_, what_, std::current_exception(), timeout_);
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
    : backend_(std::move(backend)),
      world_(std::move(world)),
      timeout_(options.timeout()),
      device_(options.device()),
      store_(options.store()),
      check_agreement_(options.check_agreement() && detail::can_check_agreement(*backend_)),
      recorder_(options.flight_recorder_size()),
      failure_log_(options.failure_log()) {
  DPT_ASSERT(backend_, "a communicator needs a backend");
  survive_closed_sockets();
  DPT_ASSERT(backend_->getRank() == world_.rank && backend_->getSize() == world_.world_size,
             "backend rank/size ", backend_->getRank(), "/", backend_->getSize(), " disagree with world ",
             world_.rank, "/", world_.world_size);
  // Asked of the backend itself, in the same order on every rank (compat::backend_reduces).
  for (const auto type : {at::kHalf, at::kBFloat16}) {
    try {
      if (!compat::backend_reduces(*backend_, type)) through_float_.push_back(type);
    } catch (const std::exception& e) {
      throw DistError(str("rank ", world_.rank, ": the group's first collective (a one-element all_reduce of ", type,
                          ", asking the backend which types it reduces) failed: ", e.what(),
                          ". Every rank of the job must start; look for one that did not, or that failed first"));
    }
  }
  transport_ = transport::make_transport(
      backend_, world_,
      transport::TransportOptions()
          .timeout(timeout_)
          .shared_memory(options.shared_memory())
          .store(store_)
          .check_agreement(check_agreement_));
}

Communicator::~Communicator() {
  transport_.reset();  // a transport's thread finishes or fails what is queued before the backend goes
  compat::shutdown_backend(*backend_);
}

std::string Communicator::backend_name() const { return backend_->getBackendName(); }

std::string Communicator::transport() const { return transport_->describe(); }

Work Communicator::start_on_backend(const std::string& what, const at::Tensor& tensor,
                                    const std::function<compat::WorkPtr()>& launch, std::function<void()> finish) {
  CollectiveRecord record;
  const uint64_t id = recorder_.start(what, tensor, -1, &record);
  compat::WorkPtr work;
  try {
    agree(record);
    work = launch();
  } catch (...) {
    fail(id, what, std::current_exception(), timeout_);
  }
  return Work(std::move(work), std::move(finish), this, id, what, timeout_);
}

void Communicator::agree(const CollectiveRecord& record) {
  if (check_agreement_) detail::check_agreement(*backend_, record, timeout_);
}

void Communicator::fail(uint64_t id, const std::string& what, std::exception_ptr cause,
                        std::chrono::milliseconds waited) {
  recorder_.end(id, CollectiveRecord::State::Failed);
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

namespace {

c10d::ReduceOp to_c10d(ReduceOp op) {
  switch (op) {
    case ReduceOp::Sum: return c10d::ReduceOp::SUM;
    case ReduceOp::Mean: return c10d::ReduceOp::AVG;
    case ReduceOp::Max: return c10d::ReduceOp::MAX;
    case ReduceOp::Min: return c10d::ReduceOp::MIN;
  }
  return c10d::ReduceOp::SUM;
}

}  // namespace

at::Tensor Communicator::wire_tensor(const at::Tensor& tensor) const {
  const bool through_float =
      std::find(through_float_.begin(), through_float_.end(), tensor.scalar_type()) != through_float_.end();
  return through_float ? tensor.to(at::kFloat).contiguous() : tensor.contiguous();
}

Work Communicator::start_all_reduce(at::Tensor tensor, ReduceOp op, std::function<void()> then) {
  const std::string what = "all_reduce(" + to_string(op) + ")";
  DPT_CHECK(op != ReduceOp::Mean || at::isFloatingType(tensor.scalar_type()), ConfigError, "rank ", rank(),
            ": ", what, " with mean needs a floating-point tensor, got ", tensor.scalar_type());
  at::Tensor wire = wire_tensor(tensor);
  std::function<void()> finish = std::move(then);
  if (!wire.is_same(tensor)) {
    finish = [tensor, wire, then = std::move(finish)]() mutable {
      tensor.copy_(wire);
      if (then) then();
    };
  }
  return start_transported(what, tensor, std::move(wire), op, std::move(finish));
}

Work Communicator::start_transported(const std::string& what, const at::Tensor& described, at::Tensor wire,
                                     ReduceOp op, std::function<void()> finish) {
  CollectiveRecord record;
  const uint64_t id = recorder_.start(what, described, -1, &record);
  compat::WorkPtr work;
  try {
    work = transport_->all_reduce(std::move(wire), op, record);
  } catch (...) {
    fail(id, what, std::current_exception(), timeout_);
  }
  // A transport that bounds its operations itself says which peer it waited for; a wait that
  // ended first would only say that it took too long.
  Work started(std::move(work), std::move(finish), this, id, what, timeout_ + transport_->failure_report_delay());
  if (!device_.is_cuda()) started.watch_completion();
  return started;
}

void Communicator::all_reduce(at::Tensor& tensor, ReduceOp op) { start_all_reduce(tensor, op).wait(); }

Work Communicator::all_reduce_async(at::Tensor tensor, ReduceOp op) { return start_all_reduce(std::move(tensor), op); }

Work Communicator::broadcast_async(at::Tensor tensor, int root) {
  DPT_CHECK(root >= 0 && root < size(), ConfigError, "rank ", rank(), ": broadcast from rank ", root,
            ", which is outside the world of ", size());
  at::Tensor wire = wire_tensor(tensor);
  std::vector<at::Tensor> tensors{wire};
  c10d::BroadcastOptions options;
  options.rootRank = root;
  options.timeout = timeout_;
  std::function<void()> finish;
  if (!wire.is_same(tensor)) finish = [tensor, wire]() mutable { tensor.copy_(wire); };
  return start_on_backend(
      "broadcast", tensor, [&] { return backend_->broadcast(tensors, options); }, std::move(finish));
}

void Communicator::broadcast(at::Tensor& tensor, int root) { broadcast_async(tensor, root).wait(); }

Work Communicator::start_point_to_point(const std::string& operation, at::Tensor tensor, int peer, int tag) {
  const std::string what = str(operation, operation == "recv" ? " from rank " : " to rank ", peer, " (tag ", tag, ")");
  DPT_CHECK(peer >= 0 && peer < size() && peer != rank(), ConfigError, "rank ", rank(), ": ", what,
            ": the peer must be another rank of the world of ", size());
  DPT_CHECK(tensor.is_contiguous(), ConfigError, "rank ", rank(), ": ", what, " needs a contiguous tensor");
  std::vector<at::Tensor> tensors{tensor};
  const uint64_t id = recorder_.start(operation, tensor, peer);
  compat::WorkPtr work;
  try {
    work = operation == "recv" ? backend_->recv(tensors, peer, tag) : backend_->send(tensors, peer, tag);
  } catch (...) {
    fail(id, what, std::current_exception(), timeout_);
  }
  Work started(std::move(work), nullptr, this, id, what, timeout_);
  if (!device_.is_cuda()) started.watch_completion();
  return started;
}

Work Communicator::send_async(at::Tensor tensor, int peer, int tag) {
  return start_point_to_point("send", std::move(tensor), peer, tag);
}

Work Communicator::recv_async(at::Tensor tensor, int peer, int tag) {
  return start_point_to_point("recv", std::move(tensor), peer, tag);
}

void Communicator::send(const at::Tensor& tensor, int peer, int tag) { send_async(tensor, peer, tag).wait(); }

void Communicator::recv(at::Tensor& tensor, int peer, int tag) { recv_async(tensor, peer, tag).wait(); }

std::vector<at::Tensor> Communicator::all_gather(const at::Tensor& tensor) {
  if (transport_->reduces_in_shared_memory(tensor)) {
    const int64_t n = tensor.numel();
    at::Tensor slots = at::empty({size() * n}, tensor.options().memory_format(at::MemoryFormat::Contiguous));
    CollectiveRecord record;
    const uint64_t id = recorder_.start("all_gather", tensor, -1, &record);
    compat::WorkPtr work;
    try {
      work = transport_->all_gather(tensor.contiguous(), slots, record);
    } catch (...) {
      fail(id, "all_gather", std::current_exception(), timeout_);
    }
    Work(std::move(work), nullptr, this, id, "all_gather", timeout_ + transport_->failure_report_delay()).wait();
    std::vector<at::Tensor> parts;
    for (int r = 0; r < size(); ++r) parts.push_back(slots.narrow(0, r * n, n).view(tensor.sizes()));
    return parts;
  }
  at::Tensor wire = wire_tensor(tensor);
  std::vector<std::vector<at::Tensor>> outputs(1);
  for (int r = 0; r < size(); ++r) outputs[0].push_back(at::empty_like(wire));
  std::vector<at::Tensor> inputs{wire};
  c10d::AllgatherOptions options;
  options.timeout = timeout_;
  start_on_backend("all_gather", tensor, [&] { return backend_->allgather(outputs, inputs, options); }).wait();
  if (wire.scalar_type() != tensor.scalar_type()) {
    for (auto& t : outputs[0]) t = t.to(tensor.scalar_type());
  }
  return outputs[0];
}

at::Tensor Communicator::reduce_scatter(const at::Tensor& tensor, ReduceOp op) {
  DPT_CHECK(tensor.dim() >= 1 && tensor.size(0) % size() == 0, ConfigError, "rank ", rank(),
            ": reduce_scatter needs dim 0 divisible by the world size ", size(), ", got shape ", tensor.sizes());
  std::vector<int64_t> shape = tensor.sizes().vec();
  shape[0] /= size();
  at::Tensor output = at::empty(shape, tensor.options().memory_format(at::MemoryFormat::Contiguous));
  // The caller's tensor stays as it was: a copy where the reduction runs in place.
  at::Tensor input = tensor.contiguous();
  if (!scatters_natively(input, op) && input.is_same(tensor)) input = input.clone();
  reduce_scatter_async(input, output, op).wait();
  return output;
}

bool Communicator::scatters_natively(const at::Tensor& tensor, ReduceOp op) const {
  return compat::backend_supports_reduce_scatter(*backend_) &&
         (op != ReduceOp::Mean || compat::backend_supports_avg(*backend_)) &&
         !transport_->reduces_in_shared_memory(tensor);
}

Work Communicator::reduce_scatter_async(at::Tensor tensor, at::Tensor output, ReduceOp op) {
  DPT_CHECK(tensor.dim() >= 1 && tensor.size(0) % size() == 0 && tensor.is_contiguous() && output.is_contiguous() &&
                output.numel() * size() == tensor.numel(),
            ConfigError, "rank ", rank(), ": reduce_scatter needs a contiguous tensor whose dim 0 the world size ",
            size(), " divides, and a contiguous output of its slice's size; got shapes ", tensor.sizes(), " and ",
            output.sizes());
  const int64_t rows = tensor.size(0) / size();
  if (!scatters_natively(tensor, op)) {
    // Reduce everything in place, keep our slice: twice the traffic of a true reduce_scatter.
    const int64_t first = rank() * rows;
    return start_all_reduce(tensor, op, [tensor, output, first, rows]() mutable {
      output.copy_(tensor.narrow(0, first, rows).view(output.sizes()));
    });
  }
  std::vector<std::vector<at::Tensor>> inputs{tensor.split(rows, 0)};
  std::vector<at::Tensor> outputs{output.view(inputs[0][0].sizes())};
  c10d::ReduceScatterOptions options;
  options.reduceOp = to_c10d(op);
  options.timeout = timeout_;
  return start_on_backend("reduce_scatter", tensor, [&] { return backend_->reduce_scatter(outputs, inputs, options); });
}

void Communicator::barrier() {
  // A one-element sum that every rank must join, rather than the backend's barrier: Gloo's waits
  // for this rank's earlier operations too, and rethrows the failure of one its worker thread had
  // not yet let go of (1.13's refusal of the bfloat16 type probe in the constructor, raised now and
  // then at a job's first barrier). An integer, which shared memory passes on to the backend, so
  // that the agreement check compares it by name: a float would pair silently there with another
  // rank's one-element sum.
  at::Tensor token = at::zeros({1}, at::TensorOptions().dtype(at::kLong).device(device_));
  start_transported("barrier", at::Tensor(), token, ReduceOp::Sum, nullptr).wait();
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

}  // namespace dpt::dist
