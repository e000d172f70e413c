#include "dptrain/dist/rendezvous.h"

#include <netdb.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <memory>
#include <thread>
#include <vector>

#include <torch/csrc/distributed/c10d/FileStore.hpp>
#include <torch/csrc/distributed/c10d/PrefixStore.hpp>
#include <torch/csrc/distributed/c10d/TCPStore.hpp>

#include "dptrain/common/error.h"
#include "dptrain/compat/c10d_failure.h"
#include "dptrain/compat/tcp_store.h"
#include "dptrain/dist/admission.h"
#include "dptrain/dist/etcd_store.h"
#include "dptrain/dist/store_text.h"

namespace dpt::dist {

namespace {

using Clock = std::chrono::steady_clock;

std::string claim_key(int rank) { return "dpt/claim/" + std::to_string(rank); }
std::string world_key(int rank) { return "dpt/world_size/" + std::to_string(rank); }
std::string proof_key(int rank) { return "dpt/proof/" + std::to_string(rank); }
std::string place(int rank) { return "rank " + std::to_string(rank); }

std::string seconds(std::chrono::milliseconds d) {
  return str(static_cast<double>(d.count()) / 1000.0, " s");
}

// "waited 4 s, giving up in 11 s": whole seconds, for progress lines.
std::string wait_so_far(Clock::time_point start, Clock::time_point deadline) {
  using std::chrono::duration_cast;
  const auto now = Clock::now();
  const auto waited = duration_cast<std::chrono::seconds>(now - start).count();
  const auto left = duration_cast<std::chrono::seconds>(std::max(deadline - now, Clock::duration::zero())).count();
  return str("waited ", waited, " s, giving up in ", left, " s");
}

// When the next progress line is due: after the first delay, then at doubling intervals of at
// most a minute, so that a long wait stays visible without filling the log.
class ReportSchedule {
 public:
  ReportSchedule(const RendezvousOptions& options, bool this_rank_reports)
      : report_(this_rank_reports ? options.report : RendezvousReport()),
        interval_(options.first_report),
        next_(Clock::now() + options.first_report) {}

  // Calls the report with `line()` when one is due.
  template <typename Line>
  void tick(const Line& line) {
    if (!report_ || Clock::now() < next_) return;
    report_(line());
    interval_ = std::min<std::chrono::milliseconds>(interval_ * 2, std::chrono::minutes(1));
    next_ = Clock::now() + interval_;
  }

 private:
  RendezvousReport report_;
  std::chrono::milliseconds interval_;
  Clock::time_point next_;
};

// "1, 3": up to 16 numbers, then "...".
std::string list_numbers(const std::vector<int>& numbers) {
  std::string text;
  for (size_t i = 0; i < numbers.size() && i < 16; ++i) text += (i ? ", " : "") + std::to_string(numbers[i]);
  if (numbers.size() > 16) text += ", ...";
  return text;
}

// "1, 3", and in a job of several nodes the nodes too: "2, 3 (node 1)", taking every node to run
// local_world_size ranks, as the launchers that set it do.
std::string describe_ranks(const std::vector<int>& ranks, const WorldInfo& world) {
  if (ranks.empty()) return "none";
  std::string text = list_numbers(ranks);
  if (world.local_world_size > 0 && world.local_world_size < world.world_size) {
    std::vector<int> nodes;
    for (int r : ranks) {
      const int node = r / world.local_world_size;
      if (nodes.empty() || nodes.back() != node) nodes.push_back(node);
    }
    text += str(" (node", nodes.size() > 1 ? "s " : " ", list_numbers(nodes), ")");
  }
  return text;
}

// Who listens at the master address, as the messages name it: rank 0, or torchrun's agent.
struct StoreHost {
  const char* store;    // what the other ranks connect to
  const char* process;  // what must be running for it to be there
};

StoreHost store_host(const WorldInfo& world) {
  if (!world.etcd_endpoints.empty()) return {"the job's etcd cluster", "a majority of its members"};
  if (world.agent_store) return {"torchrun's agent store", "torchrun"};
  return {"the master (rank 0)", "rank 0"};
}

// Returns once something accepts TCP connections on host:port, or at the deadline. LibTorch's
// store client retries a refused connection only after about a second; probing first lets the
// common case, a master that comes up a few milliseconds after its peers, cost milliseconds.
// Returns false when nothing listened by the deadline. Reports the wait as RendezvousOptions says.
bool wait_for_listener(const std::string& host, int port, const WorldInfo& world, const RendezvousOptions& options) {
  const auto start = Clock::now();
  const auto deadline = start + options.timeout;
  // Every waiting rank says this one: rank 0, which would say who is missing, is what is missing.
  ReportSchedule schedule(options, /*this_rank_reports=*/true);
  addrinfo hints{};
  hints.ai_family = AF_UNSPEC;
  hints.ai_socktype = SOCK_STREAM;
  addrinfo* addresses = nullptr;
  if (getaddrinfo(host.c_str(), std::to_string(port).c_str(), &hints, &addresses) != 0) {
    return true;  // let the store report the unresolvable name
  }
  std::unique_ptr<addrinfo, decltype(&freeaddrinfo)> owner(addresses, freeaddrinfo);
  while (Clock::now() < deadline) {
    for (addrinfo* a = addresses; a != nullptr; a = a->ai_next) {
      int fd = socket(a->ai_family, a->ai_socktype | SOCK_CLOEXEC, a->ai_protocol);
      if (fd < 0) continue;
      bool connected = connect(fd, a->ai_addr, a->ai_addrlen) == 0;
      close(fd);
      if (connected) return true;
    }
    schedule.tick([&] {
      return str("rank ", world.rank, ": waiting for ", store_host(world).store, " at ", host, ":", port,
                 ": nothing accepts connections there yet; ", wait_so_far(start, deadline));
    });
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  }
  return false;
}

TimeoutError unreachable_master(const WorldInfo& world, const std::string& host, int port,
                                const RendezvousOptions& options, const std::string& cause) {
  const StoreHost listener = store_host(world);
  return TimeoutError(str("rank ", world.rank, ": could not reach ", listener.store, " at ", host, ":", port,
                          " within ", seconds(options.timeout), ". Check that ", listener.process,
                          " is running, that MASTER_ADDR/--master-addr names its host as seen from here, and that "
                          "the port is open. (",
                          cause, ")"));
}

// Under torchrun's agent store every rank is a client, and each restart round keys its own
// namespace (the one PyTorch's workers use): the store outlives the rounds, so a round must not
// read what the one before it left there.
// The job's store in its etcd cluster (etcd_store.h), in the round's namespace as under an agent.
compat::StorePtr make_etcd_store(const WorldInfo& world, const RendezvousOptions& options) {
  compat::StorePtr store = c10::make_intrusive<EtcdStore>(
      EtcdStoreOptions(world.etcd_endpoints, etcd_job_prefix(world.run_id)).timeout(options.timeout));
  return c10::make_intrusive<c10d::PrefixStore>(agent_round_prefix(world.restart_count), std::move(store));
}

compat::StorePtr make_tcp_store(const std::string& host, int port, const WorldInfo& world,
                                const RendezvousOptions& options) {
  const bool serves = world.rank == 0 && !world.agent_store;
  if (!serves && !wait_for_listener(host, port, world, options)) {
    throw unreachable_master(world, host, port, options, "nothing accepted connections on that port");
  }
  c10d::TCPStoreOptions tcp = compat::tcp_store_options();
  tcp.port = static_cast<std::uint16_t>(port);
  tcp.isServer = serves;
  tcp.waitWorkers = false;  // the join protocol below waits, with names and a bound
  tcp.timeout = options.timeout;
  try {
    compat::StorePtr store = compat::make_tcp_store(host, tcp);
    if (!world.agent_store) return store;
    return c10::make_intrusive<c10d::PrefixStore>(agent_round_prefix(world.restart_count), std::move(store));
  } catch (const std::exception& e) {
    const std::string cause = compat::short_message(e);
    const compat::FailureCause kind = compat::failure_cause(cause);
    if (serves && kind == compat::FailureCause::AddressInUse) {
      throw DistError(str("rank 0: cannot start the rendezvous store on port ", port,
                          ": the port is busy (another job, or a leftover process from an earlier run, "
                          "holds it). Pick a free --master-port / MASTER_PORT or stop that process. (",
                          cause, ")"));
    }
    if (kind == compat::FailureCause::Timeout) {
      throw unreachable_master(world, host, port, options, cause);
    }
    const StoreHost listener = store_host(world);
    throw DistError(str("rank ", world.rank, ": rendezvous with ", listener.store, " at ", host, ":", port,
                        " failed: ", cause, ". Check MASTER_ADDR/MASTER_PORT and that ", listener.process,
                        " is running."));
  }
}

DistError lost_store(const WorldInfo& world, const std::exception& e) {
  return DistError(str("rank ", world.rank, ": lost the rendezvous store while joining (", compat::short_message(e),
                       "). ", store_host(world).process,
                       ", which hosts it, has probably exited; its output says why."));
}

// Runs `step`, turning a store that went away under it into lost_store's error.
template <typename Step>
auto translating_store_errors(const WorldInfo& world, const Step& step) -> decltype(step()) {
  try {
    return step();
  } catch (const Error&) {
    throw;
  } catch (const std::exception& e) {
    throw lost_store(world, e);
  }
}

constexpr const char* kAbortKey = "dpt/abort";
constexpr const char* kAbortAckKey = "dpt/abort_acks";

// Reports that rank `other` disagrees about the world size, after telling the other ranks. The
// store's host (rank 0) waits, briefly, until the `peers` ranks it has seen have read the news:
// exiting at once would take the store away and leave them with a lost-connection error instead.
[[noreturn]] void abort_join(c10d::Store& store, const WorldInfo& world, int other, int peers) {
  const std::string theirs = read_text(store, world_key(other));
  write_text(store, kAbortKey, "1");
  store.add(kAbortAckKey, 1);
  if (world.rank == 0) {
    const auto linger_until = Clock::now() + std::chrono::seconds(3);
    while (store.add(kAbortAckKey, 0) < peers + 1 && Clock::now() < linger_until) {
      std::this_thread::sleep_for(std::chrono::milliseconds(5));
    }
  }
  throw ConfigError(str("rank ", world.rank, ": rank ", other, " was started with world size ", theirs,
                        " but this rank with ", world.world_size,
                        ". Start every process with the same WORLD_SIZE / --world-size."));
}

}  // namespace

void join(c10d::Store& store, const WorldInfo& world, const RendezvousOptions& options) {
  const int me = world.rank;
  const int n = world.world_size;
  DPT_CHECK(me >= 0 && me < n, ConfigError, "rank ", me, " is outside the world of ", n,
            " processes (valid ranks: 0..", n - 1, ")");

  const auto start = Clock::now();
  const auto deadline = start + options.timeout;
  const std::string where = options.address.empty() ? std::string() : " at " + options.address;
  ReportSchedule schedule(options, me == 0 || options.all_ranks_report);
  // Rank 0 opens the admission as it arrives; the others take no place before it has.
  Admission admission = translating_store_errors(world, [&] {
    const std::string prefix = "dpt/";
    while (me != 0 && !Admission::is_open(store, prefix)) {
      DPT_CHECK(Clock::now() < deadline, TimeoutError, "rank ", me, ": rendezvous timed out after ",
                seconds(options.timeout), ": rank 0, which opens it, did not. Check that rank 0 was started, with "
                "the same master address and port (here ", options.address.empty() ? "unknown" : options.address,
                "), or raise the rendezvous timeout (--rendezvous-timeout).");
      schedule.tick([&] {
        return str("rank ", me, ": rendezvous", where, ": waiting for rank 0 to open it; ",
                   wait_so_far(start, deadline));
      });
      std::this_thread::sleep_for(std::chrono::milliseconds(10));
    }
    const AdmissionOptions admission_options =
        AdmissionOptions(prefix, options.timeout).token(options.job_token).address(options.address);
    Admission admitted = me == 0 ? Admission::open(store, place(me), admission_options)
                                 : Admission::enter(store, place(me), admission_options);
    DPT_CHECK(store.add(claim_key(me), 1) == 1, ConfigError, "rank ", me,
              ": another process has already joined this job as rank ", me,
              ". Two processes were given the same RANK; give each process its own rank.");
    // The proof first: whoever sees this rank's world size finds its proof already there.
    write_text(store, proof_key(me), admitted.proof(place(me)));
    return admitted;
  });
  const std::string size_text = std::to_string(n);
  translating_store_errors(world, [&] { write_text(store, world_key(me), size_text); });

  // Poll rather than block in store.wait(): a blocked wait can say neither which ranks are missing
  // nor that one of them disagrees about the world size.
  std::vector<bool> seen(n, false);
  seen[me] = true;
  int joined = 1;
  auto ranks_where = [&](bool joined_ones) {
    std::vector<int> ranks;
    for (int r = 0; r < n; ++r) {
      if (seen[r] == joined_ones) ranks.push_back(r);
    }
    return ranks;
  };
  try {
    while (true) {
      for (int r = 0; r < n; ++r) {
        if (seen[r] || !store.check({world_key(r)})) continue;
        seen[r] = true;
        ++joined;
        const bool proven = !admission.has_token() ||
                            (store.check({proof_key(r)}) && admission.verify(place(r), read_text(store, proof_key(r))));
        DPT_CHECK(proven, DistError, "rank ", me, ": rank ", r, " was taken by a process that does not hold this job's "
                  "token: something other than this job's processes reaches its rendezvous store", where,
                  ". Stop it, and keep the job's address and port private (docs/security.md)");
        if (read_text(store, world_key(r)) != size_text) abort_join(store, world, r, joined - 1);
      }
      if (me == 0 && options.report) {
        for (const std::string& line : admission.take_refusals(store)) options.report(str("rank 0: ", line));
      }
      if (joined == n) return;
      // A rank that found a disagreement with someone else may host the store and be about to
      // exit; find the disagreement from this side, so every rank says what is wrong.
      if (store.check({kAbortKey})) {
        for (int r = 0; r < n; ++r) {
          if (r != me && store.check({world_key(r)}) && read_text(store, world_key(r)) != size_text) {
            abort_join(store, world, r, 0);
          }
        }
      }
      if (Clock::now() >= deadline) break;
      schedule.tick([&] {
        return str("rank ", me, ": rendezvous", where, ": ", joined, " of ", n, " ranks joined (",
                   describe_ranks(ranks_where(true), world), "); waiting for rank(s) ",
                   describe_ranks(ranks_where(false), world), "; ", wait_so_far(start, deadline));
      });
      std::this_thread::sleep_for(std::chrono::milliseconds(10));
    }
  } catch (const Error&) {
    throw;
  } catch (const std::exception& e) {
    throw lost_store(world, e);
  }

  throw TimeoutError(str("rank ", me, ": rendezvous timed out after ", seconds(options.timeout), ": ", joined, " of ",
                         n, " ranks joined; missing rank(s) ", describe_ranks(ranks_where(false), world),
                         ". Check that every rank was started, with the same master address and port (here ",
                         options.address.empty() ? "unknown" : options.address, ") and world size, or raise the "
                         "rendezvous timeout (--rendezvous-timeout)."));
}

compat::StorePtr rendezvous(const InitMethod& method, const WorldInfo& world, const RendezvousOptions& given) {
  RendezvousOptions options = given;
  const bool tcp = method.kind != InitMethod::Kind::File;
  const std::string host = method.kind == InitMethod::Kind::Tcp ? method.host : world.master_addr;
  const int port = method.kind == InitMethod::Kind::Tcp ? method.port : world.master_port;
  if (options.address.empty()) options.address = tcp ? str(host, ":", port) : "file://" + method.path;
  // From here on `agent_store` is set only while joining the agent's: a file, or an address other
  // than the agent's, is a store of the job's own.
  WorldInfo joining = world;
  if (!tcp || !world.agent_hosts(host, port)) joining.agent_store.reset();
  compat::StorePtr store;
  switch (method.kind) {
    case InitMethod::Kind::Env:
      store = world.etcd_endpoints.empty() ? make_tcp_store(host, port, joining, options)
                                           : make_etcd_store(world, options);
      break;
    case InitMethod::Kind::Tcp:
      store = make_tcp_store(host, port, joining, options);
      break;
    case InitMethod::Kind::File:
      try {
        store = c10::make_intrusive<c10d::FileStore>(method.path, world.world_size);
      } catch (const std::exception& e) {
        throw DistError(str("rank ", world.rank, ": cannot use the rendezvous file '", method.path,
                            "': ", compat::short_message(e), ". It must be on a filesystem every rank can write."));
      }
      store->setTimeout(options.timeout);
      break;
  }
  join(*store, joining, options);
  return store;
}

compat::StorePtr connect_to_job_store(const WorldInfo& world, const RendezvousOptions& options) {
  DPT_CHECK(world.store_outlives_ranks(), ConfigError, "rank ", world.rank, ": only a store its launcher serves, ",
            "or an etcd cluster, outlives the ranks that joined it");
  if (!world.etcd_endpoints.empty()) return make_etcd_store(world, options);
  return make_tcp_store(world.agent_store->host, world.agent_store->port, world, options);
}

std::string agent_round_prefix(int restart_count) { return str("/worker/attempt_", restart_count); }

std::string failed_worker_key(int rank) { return str("dptrain/failed/", rank); }

}  // namespace dpt::dist
