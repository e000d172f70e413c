#include "dptrain/dist/rendezvous.h"

#include <netdb.h>
#include <sys/socket.h>
#include <unistd.h>

#include <memory>
#include <thread>

#include <torch/csrc/distributed/c10d/FileStore.hpp>
#include <torch/csrc/distributed/c10d/TCPStore.hpp>

#include "dptrain/common/error.h"
#include "failure.h"

namespace dpt::dist {

namespace {

using Clock = std::chrono::steady_clock;

std::string claim_key(int rank) { return "dpt/claim/" + std::to_string(rank); }
std::string world_key(int rank) { return "dpt/world_size/" + std::to_string(rank); }

std::string seconds(std::chrono::milliseconds d) {
  return str(static_cast<double>(d.count()) / 1000.0, " s");
}

std::string read_string(c10d::Store& store, const std::string& key) {
  auto bytes = store.get(key);
  return std::string(bytes.begin(), bytes.end());
}

// Returns once something accepts TCP connections on host:port, or at the deadline. LibTorch's
// store client retries a refused connection only after about a second; probing first lets the
// common case, a master that comes up a few milliseconds after its peers, cost milliseconds.
// Returns false when nothing listened by the deadline.
bool wait_for_listener(const std::string& host, int port, Clock::time_point deadline) {
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
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  }
  return false;
}

TimeoutError unreachable_master(const WorldInfo& world, const std::string& host, int port,
                                const RendezvousOptions& options, const std::string& cause) {
  return TimeoutError(str("rank ", world.rank, ": could not reach the master at ", host, ":", port, " within ",
                          seconds(options.timeout),
                          ". Check that rank 0 is running, that MASTER_ADDR/--master-addr names its host as seen "
                          "from here, and that the port is open. (",
                          cause, ")"));
}

compat::StorePtr make_tcp_store(const std::string& host, int port, const WorldInfo& world,
                                const RendezvousOptions& options) {
  if (world.rank != 0 && !wait_for_listener(host, port, Clock::now() + options.timeout)) {
    throw unreachable_master(world, host, port, options, "nothing accepted connections on that port");
  }
  c10d::TCPStoreOptions tcp;
  tcp.port = static_cast<std::uint16_t>(port);
  tcp.isServer = world.rank == 0;
  tcp.waitWorkers = false;  // the join protocol below waits, with names and a bound
  tcp.timeout = options.timeout;
  try {
    return c10::make_intrusive<c10d::TCPStore>(host, tcp);
  } catch (const std::exception& e) {
    std::string cause = detail::short_message(e);
    if (world.rank == 0 && (detail::mentions(cause, "in use") || detail::mentions(cause, "listen"))) {
      throw DistError(str("rank 0: cannot start the rendezvous store on port ", port,
                          ": the port is busy (another job, or a leftover process from an earlier run, "
                          "holds it). Pick a free --master-port / MASTER_PORT or stop that process. (",
                          cause, ")"));
    }
    if (detail::mentions(cause, "timed out") || detail::mentions(cause, "timeout")) {
      throw unreachable_master(world, host, port, options, cause);
    }
    throw DistError(str("rank ", world.rank, ": rendezvous with the master at ", host, ":", port,
                        " failed: ", cause, ". Check MASTER_ADDR/MASTER_PORT and that rank 0 is running."));
  }
}

constexpr const char* kAbortKey = "dpt/abort";
constexpr const char* kAbortAckKey = "dpt/abort_acks";

// Reports that rank `other` disagrees about the world size, after telling the other ranks. The
// store's host (rank 0) waits, briefly, until the `peers` ranks it has seen have read the news:
// exiting at once would take the store away and leave them with a lost-connection error instead.
[[noreturn]] void abort_join(c10d::Store& store, const WorldInfo& world, int other, int peers) {
  const std::string theirs = read_string(store, world_key(other));
  const std::string flag = "1";
  store.set(kAbortKey, std::vector<uint8_t>(flag.begin(), flag.end()));
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

  DPT_CHECK(store.add(claim_key(me), 1) == 1, ConfigError, "rank ", me,
            ": another process has already joined this job as rank ", me,
            ". Two processes were given the same RANK; give each process its own rank.");
  const std::string size_text = std::to_string(n);
  store.set(world_key(me), std::vector<uint8_t>(size_text.begin(), size_text.end()));

  // Poll rather than block in store.wait(): a blocked wait can say neither which ranks are missing
  // nor that one of them disagrees about the world size.
  const auto deadline = Clock::now() + options.timeout;
  std::vector<bool> seen(n, false);
  seen[me] = true;
  int joined = 1;
  try {
    while (true) {
      for (int r = 0; r < n; ++r) {
        if (seen[r] || !store.check({world_key(r)})) continue;
        seen[r] = true;
        ++joined;
        if (read_string(store, world_key(r)) != size_text) abort_join(store, world, r, joined - 1);
      }
      if (joined == n) return;
      // A rank that found a disagreement with someone else may host the store and be about to
      // exit; find the disagreement from this side, so every rank says what is wrong.
      if (store.check({kAbortKey})) {
        for (int r = 0; r < n; ++r) {
          if (r != me && store.check({world_key(r)}) && read_string(store, world_key(r)) != size_text) {
            abort_join(store, world, r, 0);
          }
        }
      }
      if (Clock::now() >= deadline) break;
      std::this_thread::sleep_for(std::chrono::milliseconds(10));
    }
  } catch (const Error&) {
    throw;
  } catch (const std::exception& e) {
    throw DistError(str("rank ", me, ": lost the rendezvous store while joining (", detail::short_message(e),
                        "). The rank hosting it (rank 0) has probably exited; its output says why."));
  }

  std::string missing;
  int shown = 0;
  for (int r = 0; r < n && shown < 16; ++r) {
    if (!seen[r]) missing += (shown++ ? ", " : "") + std::to_string(r);
  }
  if (n - joined > shown) missing += ", ...";
  throw TimeoutError(str("rank ", me, ": rendezvous timed out after ", seconds(options.timeout), ": ", joined,
                         " of ", n, " ranks joined; missing rank(s) ", missing,
                         ". Check that every rank was started, with the same master address, port and "
                         "world size, or raise the timeout."));
}

compat::StorePtr rendezvous(const InitMethod& method, const WorldInfo& world, const RendezvousOptions& options) {
  compat::StorePtr store;
  switch (method.kind) {
    case InitMethod::Kind::Env:
      store = make_tcp_store(world.master_addr, world.master_port, world, options);
      break;
    case InitMethod::Kind::Tcp:
      store = make_tcp_store(method.host, method.port, world, options);
      break;
    case InitMethod::Kind::File:
      try {
        store = c10::make_intrusive<c10d::FileStore>(method.path, world.world_size);
      } catch (const std::exception& e) {
        throw DistError(str("rank ", world.rank, ": cannot use the rendezvous file '", method.path,
                            "': ", detail::short_message(e), ". It must be on a filesystem every rank can write."));
      }
      store->setTimeout(options.timeout);
      break;
  }
  join(*store, world, options);
  return store;
}

}  // namespace dpt::dist
