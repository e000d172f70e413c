#include "dptrain/parallel/ps/server.h"

#include <torch/utils.h>

#include <algorithm>
#include <atomic>
#include <condition_variable>
#include <limits>
#include <mutex>
#include <thread>

#include "dptrain/common/error.h"
#include "dptrain/parallel/ps/shard_layout.h"
#include "message.h"

namespace dpt::ps {

namespace {

// The part of a chunk that is one parameter's: the weight decay is a parameter's.
struct ParameterRange {
  int64_t offset = 0;  // in the chunk
  int64_t numel = 0;
  double weight_decay = 0;
};

// This server's chunk of one bucket.
struct Shard {
  Chunk chunk;
  at::Tensor weights;
  at::Tensor momentum;
  bool has_momentum = false;
  std::vector<ParameterRange> parameters;
  std::mutex mutex;
  std::condition_variable updated;
  int64_t version = 0;  // updates applied
  // Sync: the step's pushes until every active worker's has come.
  std::vector<at::Tensor> deposits;
  std::vector<char> deposited;
  double lr = 0;
};

}  // namespace

struct ParameterServer::State {
  State(const std::vector<ServedParameter>& params, std::shared_ptr<dist::Communicator> world_comm, PsOptions o,
        SgdRule rule);

  void receive_start();
  void session(int worker);
  // Applies a worker's gradient chunk for bucket b as the consistency model says (Sync: waits
  // until the step's update is done).
  void push(size_t b, int worker, at::Tensor grad, double lr);
  void complete_if_all_pushed(Shard& shard);
  void apply(Shard& shard, const at::Tensor& grad, double lr);
  // After a worker's last bucket of a step; Bounded: waits until it is within the staleness.
  void end_round(int worker);
  void send_state(int worker);
  void leave(int worker, const std::string& failure);
  int64_t slowest_active() const;  // under roster_mutex
  std::string who() const { return str("parameter server rank ", world->rank()); }

  std::shared_ptr<dist::Communicator> world;
  PsOptions options;
  SgdRule sgd;
  Roles roles;
  ShardLayout layout;
  std::vector<std::unique_ptr<Shard>> shards;
  std::atomic<int64_t> updates{0};

  std::mutex roster_mutex;
  std::condition_variable roster_changed;
  std::vector<int64_t> progress;  // steps each worker has pushed in full
  std::vector<char> active;       // neither stopped nor failed
  std::vector<int> lost;
  int64_t max_lead = 0;
  std::string failure;  // Sync: why the job cannot go on
};

ParameterServer::State::State(const std::vector<ServedParameter>& params,
                              std::shared_ptr<dist::Communicator> world_comm, PsOptions o, SgdRule rule)
    : world(std::move(world_comm)),
      options(o),
      sgd(rule),
      roles(world->size(), o.servers()),
      layout(served_tensors(params), o.servers(), o.buckets()),
      progress(roles.workers(), 0),
      active(roles.workers(), 1) {
  DPT_CHECK(roles.is_server(world->rank()), ConfigError, "rank ", world->rank(), " is a worker of ", roles.world_size,
            " processes with ", roles.servers, " server(s), not a server");
  DPT_CHECK(layout.bucket_count() > 0, ConfigError, who(), ": there is nothing to serve: no parameter was given");
  const int server = roles.server_index(world->rank());
  for (size_t b = 0; b < layout.bucket_count(); ++b) {
    auto shard = std::make_unique<Shard>();
    shard->chunk = layout.chunk(b, server);
    shard->weights = at::zeros({shard->chunk.numel}, at::kFloat);
    shard->momentum = at::zeros({shard->chunk.numel}, at::kFloat);
    const int64_t lo = shard->chunk.offset, hi = lo + shard->chunk.numel;
    for (size_t i : layout.bucket(b)) {
      const int64_t begin = std::max(lo, layout.placement(i).offset);
      const int64_t end = std::min(hi, layout.placement(i).offset + params[i].tensor.numel());
      if (begin < end) shard->parameters.push_back(ParameterRange{begin - lo, end - begin, params[i].weight_decay});
    }
    if (options.consistency() == Consistency::Sync) {
      for (int w = 0; w < roles.workers(); ++w) shard->deposits.push_back(at::zeros_like(shard->weights));
      shard->deposited.assign(roles.workers(), 0);
    }
    shards.push_back(std::move(shard));
  }
}

void ParameterServer::State::receive_start() {
  for (size_t b = 0; b < shards.size(); ++b) {
    Shard& shard = *shards[b];
    const int64_t n = shard.chunk.numel;
    at::Tensor message = at::empty({wire::kHeaderFloats + 2 * n}, at::kFloat);
    dist::CollectiveLabel label(str("the starting weights of bucket ", b));
    world->recv(message, /*peer=*/0, wire::state_tag(b));
    shard.weights.copy_(wire::payload(message, 0, n));
    shard.has_momentum = wire::read_header(message).has_momentum != 0;
    if (shard.has_momentum) shard.momentum.copy_(wire::payload(message, n, n));
  }
}

void ParameterServer::State::apply(Shard& shard, const at::Tensor& grad, double lr) {
  // torch.optim.SGD's step, parameter by parameter (each one's own weight decay).
  torch::NoGradGuard no_grad;
  for (const ParameterRange& range : shard.parameters) {
    at::Tensor p = shard.weights.narrow(0, range.offset, range.numel);
    at::Tensor d_p = grad.narrow(0, range.offset, range.numel);
    if (range.weight_decay != 0) d_p = d_p.add(p, range.weight_decay);
    if (sgd.momentum() != 0) {
      at::Tensor buf = shard.momentum.narrow(0, range.offset, range.numel);
      if (shard.has_momentum) {
        buf.mul_(sgd.momentum()).add_(d_p, 1 - sgd.dampening());
      } else {
        buf.copy_(d_p);
      }
      d_p = sgd.nesterov() ? d_p.add(buf, sgd.momentum()) : buf;
    }
    p.add_(d_p, -lr);
  }
  if (sgd.momentum() != 0) shard.has_momentum = true;
  ++shard.version;
  ++updates;
}

void ParameterServer::State::complete_if_all_pushed(Shard& shard) {
  int pushed = 0, expected = 0;
  {
    std::lock_guard<std::mutex> roster(roster_mutex);
    for (int w = 0; w < roles.workers(); ++w) {
      pushed += shard.deposited[w];
      expected += active[w] || shard.deposited[w];
    }
  }
  if (pushed == 0 || pushed < expected) return;
  // The mean in worker order, so that the sum does not depend on arrival order.
  at::Tensor mean;
  for (int w = 0; w < roles.workers(); ++w) {
    if (!shard.deposited[w]) continue;
    mean = mean.defined() ? mean.add_(shard.deposits[w]) : shard.deposits[w].clone();
    shard.deposited[w] = 0;
  }
  mean.div_(pushed);
  apply(shard, mean, shard.lr);
  shard.updated.notify_all();
}

void ParameterServer::State::push(size_t b, int worker, at::Tensor grad, double lr) {
  Shard& shard = *shards[b];
  std::unique_lock<std::mutex> lock(shard.mutex);
  if (options.consistency() != Consistency::Sync) {
    // A round of pushes from every worker moves the weights as far as one synchronous step.
    apply(shard, grad.mul_(1.0 / roles.workers()), lr);
    return;
  }
  shard.deposits[worker].copy_(grad);
  shard.deposited[worker] = 1;
  shard.lr = lr;
  const int64_t version = shard.version;
  complete_if_all_pushed(shard);
  const bool done = shard.updated.wait_for(lock, options.timeout(), [&] {
    std::lock_guard<std::mutex> roster(roster_mutex);
    return shard.version > version || !failure.empty();
  });
  std::lock_guard<std::mutex> roster(roster_mutex);
  std::string missing;
  for (int w = 0; w < roles.workers(); ++w) {
    if (!shard.deposited[w] && active[w]) missing += str(missing.empty() ? "" : ", ", w);
  }
  DPT_CHECK(done, TimeoutError, who(), ": bucket ", b, " waited ", options.timeout().count(),
            " ms for the gradients of worker rank(s) ", missing, "; a synchronous step needs every worker. Check ",
            "those ranks' logs; raise the timeout (--dist-timeout) if they were only slow (a long validation pass)");
  if (!failure.empty()) throw DistError(failure);
}

int64_t ParameterServer::State::slowest_active() const {
  int64_t slowest = std::numeric_limits<int64_t>::max();
  for (int w = 0; w < roles.workers(); ++w) {
    if (active[w]) slowest = std::min(slowest, progress[w]);
  }
  return slowest;
}

void ParameterServer::State::end_round(int worker) {
  std::unique_lock<std::mutex> lock(roster_mutex);
  ++progress[worker];
  roster_changed.notify_all();
  if (options.consistency() == Consistency::Bounded) {
    const bool within = roster_changed.wait_for(lock, options.timeout(), [&] {
      return progress[worker] - slowest_active() <= options.staleness() || !failure.empty();
    });
    DPT_CHECK(within, TimeoutError, who(), ": worker rank ", worker, " finished step ", progress[worker],
              " and waited ", options.timeout().count(), " ms for the slowest worker to reach step ",
              progress[worker] - options.staleness(), " (staleness ", options.staleness(), "); check the slow ",
              "workers' logs, or raise the timeout (--dist-timeout)");
  }
  max_lead = std::max(max_lead, progress[worker] - slowest_active());
}

void ParameterServer::State::send_state(int worker) {
  for (size_t b = 0; b < shards.size(); ++b) {
    Shard& shard = *shards[b];
    const int64_t n = shard.chunk.numel;
    at::Tensor message = at::empty({wire::kHeaderFloats + 2 * n}, at::kFloat);
    {
      std::lock_guard<std::mutex> lock(shard.mutex);
      wire::Header header;
      header.request = wire::Request::State;
      header.has_momentum = shard.has_momentum ? 1 : 0;
      wire::write_header(message, header);
      wire::payload(message, 0, n).copy_(shard.weights);
      wire::payload(message, n, n).copy_(shard.momentum);
    }
    dist::CollectiveLabel label(str("bucket ", b, "'s state"));
    world->send(message, worker, wire::state_tag(b));
  }
}

void ParameterServer::State::leave(int worker, const std::string& why) {
  {
    std::lock_guard<std::mutex> roster(roster_mutex);
    if (!active[worker]) return;
    active[worker] = 0;
    if (!why.empty()) {
      lost.push_back(worker);
      int left = 0;
      for (char a : active) left += a;
      if (options.consistency() == Consistency::Sync) {
        if (failure.empty()) failure = why;
      } else if (options.log() != nullptr) {
        *options.log() << who() << ": worker rank " << worker << " left after " << progress[worker] << " step(s) ("
                       << why << "); serving the other " << left << " worker(s)" << std::endl;
      }
    }
  }
  roster_changed.notify_all();
  // A synchronous step no longer waits for this worker.
  for (auto& shard : shards) {
    std::lock_guard<std::mutex> lock(shard->mutex);
    if (options.consistency() == Consistency::Sync) complete_if_all_pushed(*shard);
    shard->updated.notify_all();
  }
}

void ParameterServer::State::session(int worker) {
  try {
    std::vector<at::Tensor> inbox, outbox;
    for (const auto& shard : shards) {
      inbox.push_back(at::empty({wire::kHeaderFloats + shard->chunk.numel}, at::kFloat));
      outbox.push_back(at::empty({shard->chunk.numel}, at::kFloat));
    }
    for (size_t b = 0;; b = (b + 1) % shards.size()) {
      {
        dist::CollectiveLabel label(str("bucket ", b, " of step ", progress[worker] + 1));
        world->recv(inbox[b], worker, wire::push_tag(b));
      }
      const wire::Header header = wire::read_header(inbox[b]);
      if (b == 0 && header.request == wire::Request::Stop) return leave(worker, "");
      if (b == 0 && header.request == wire::Request::State) {
        send_state(worker);
        b = shards.size() - 1;  // (the loop's step makes it 0) the next message is a bucket 0 again
        continue;
      }
      Shard& shard = *shards[b];
      push(b, worker, wire::payload(inbox[b], 0, shard.chunk.numel), header.lr);
      if (b + 1 == shards.size()) end_round(worker);
      if (shard.chunk.numel == 0) continue;
      {
        std::lock_guard<std::mutex> lock(shard.mutex);
        outbox[b].copy_(shard.weights);
      }
      dist::CollectiveLabel label(str("bucket ", b, "'s weights"));
      world->send(outbox[b], worker, wire::push_tag(b));
    }
  } catch (const std::exception& e) {
    leave(worker, e.what());
  }
}

ParameterServer::ParameterServer(const std::vector<ServedParameter>& params, std::shared_ptr<dist::Communicator> world,
                                 PsOptions options, SgdRule sgd)
    : state_(std::make_shared<State>(params, std::move(world), options, sgd)) {}

ParameterServer::~ParameterServer() = default;

ServerReport ParameterServer::serve() {
  State& s = *state_;
  s.receive_start();
  std::vector<std::thread> sessions;
  for (int w = 0; w < s.roles.workers(); ++w) {
    sessions.emplace_back([state = state_, w] { state->session(w); });
  }
  std::string failure;
  {
    std::unique_lock<std::mutex> lock(s.roster_mutex);
    s.roster_changed.wait(lock, [&] {
      return !s.failure.empty() || std::none_of(s.active.begin(), s.active.end(), [](char a) { return a != 0; });
    });
    failure = s.failure;
  }
  if (!failure.empty()) {
    // The other sessions may be blocked on workers that wait for this step forever; they hold the
    // state, so they can outlive this call.
    for (auto& t : sessions) t.detach();
    throw DistError(str(s.who(), ": a synchronous job cannot go on: ", failure,
                        ". Restart the job; it resumes from its last checkpoint"));
  }
  for (auto& t : sessions) t.join();
  ServerReport report;
  report.rank = s.world->rank();
  report.updates = s.updates;
  report.max_lead = s.max_lead;
  report.workers_lost = s.lost;
  return report;
}

}  // namespace dpt::ps
