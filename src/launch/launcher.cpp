#include "dptrain/launch/launcher.h"

#include <arpa/inet.h>
#include <netdb.h>
#include <netinet/in.h>
#include <sched.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <cstddef>
#include <cstring>
#include <filesystem>
#include <iostream>
#include <random>

#include "dptrain/common/error.h"
#include "dptrain/common/exit_codes.h"
#include "dptrain/common/job_token.h"
#include "dptrain/launch/supervise.h"
#include "dptrain/launch/visible_gpus.h"

namespace dpt::launch {

namespace {

// The CPUs this process may run on (a Slurm allocation or taskset narrows them), in order.
std::vector<int> usable_cpus() {
  std::vector<int> cpus;
  cpu_set_t set;
  CPU_ZERO(&set);
  if (sched_getaffinity(0, sizeof(set), &set) == 0) {
    for (int cpu = 0; cpu < CPU_SETSIZE; ++cpu) {
      if (CPU_ISSET(cpu, &set)) cpus.push_back(cpu);
    }
  }
  if (cpus.empty()) {
    for (int cpu = 0; cpu < std::max(1, static_cast<int>(sysconf(_SC_NPROCESSORS_ONLN))); ++cpu) cpus.push_back(cpu);
  }
  return cpus;
}

int usable_cores() { return static_cast<int>(usable_cpus().size()); }

// "0-3,8-11": runs of consecutive CPUs.
std::string describe_cpus(const std::vector<int>& cpus) {
  std::string text;
  for (size_t i = 0; i < cpus.size();) {
    size_t j = i;
    while (j + 1 < cpus.size() && cpus[j + 1] == cpus[j] + 1) ++j;
    text += (text.empty() ? "" : ",") + std::to_string(cpus[i]) + (j > i ? "-" + std::to_string(cpus[j]) : "");
    i = j + 1;
  }
  return text;
}

std::string fresh_run_id() {
  std::random_device device;
  std::mt19937_64 generator(device() ^ static_cast<uint64_t>(getpid()));
  char id[17];
  std::snprintf(id, sizeof(id), "%016llx", static_cast<unsigned long long>(generator()));
  return id;
}

// Resolved address of `host` (a name or a number), for binding.
std::optional<sockaddr_storage> resolve_address(const std::string& host, socklen_t& length) {
  addrinfo hints{};
  hints.ai_family = AF_UNSPEC;
  hints.ai_socktype = SOCK_STREAM;
  addrinfo* found = nullptr;
  if (getaddrinfo(host.c_str(), nullptr, &hints, &found) != 0 || found == nullptr) return std::nullopt;
  sockaddr_storage address{};
  std::memcpy(&address, found->ai_addr, found->ai_addrlen);
  length = found->ai_addrlen;
  freeaddrinfo(found);
  return address;
}

// Binds a socket to `host` port 0; returns the port the kernel chose, or 0 when it cannot bind.
int bind_any_port(const std::string& host) {
  socklen_t length = 0;
  auto address = resolve_address(host, length);
  if (!address) return 0;
  int fd = socket(address->ss_family, SOCK_STREAM, 0);
  if (fd < 0) return 0;
  bool ok = bind(fd, reinterpret_cast<sockaddr*>(&*address), length) == 0 &&
            getsockname(fd, reinterpret_cast<sockaddr*>(&*address), &length) == 0;
  close(fd);
  if (!ok) return 0;
  return ntohs(address->ss_family == AF_INET6 ? reinterpret_cast<sockaddr_in6*>(&*address)->sin6_port
                                              : reinterpret_cast<sockaddr_in*>(&*address)->sin_port);
}

}  // namespace

int free_port(const std::string& address) {
  const int port = bind_any_port(address);
  DPT_CHECK(port > 0, DistError, "cannot find a free TCP port on ", address);
  return port;
}

bool is_local_address(const std::string& address) { return bind_any_port(address) > 0; }

std::vector<std::vector<int>> split_cpus(const std::vector<int>& usable, int workers) {
  if (workers < 1 || static_cast<int>(usable.size()) < workers) return {};
  std::vector<std::vector<int>> blocks(workers);
  const size_t share = usable.size() / workers, extra = usable.size() % workers;
  size_t next = 0;
  for (size_t w = 0; w < blocks.size(); ++w) {
    const size_t size = share + (w < extra ? 1 : 0);
    blocks[w].assign(usable.begin() + static_cast<std::ptrdiff_t>(next),
                     usable.begin() + static_cast<std::ptrdiff_t>(next + size));
    next += size;
  }
  return blocks;
}

LaunchOptions resolve(LaunchOptions options, const Environment& env) {
  DPT_CHECK(options.nnodes() >= 1, ConfigError, "--nnodes must be at least 1, got ", options.nnodes());
  if (options.min_nnodes()) {
    DPT_CHECK(*options.min_nnodes() >= 1 && *options.min_nnodes() <= options.nnodes(), ConfigError,
              "--nnodes MIN:MAX needs 1 <= MIN <= MAX, got ", *options.min_nnodes(), ":", options.nnodes());
    DPT_CHECK(!options.standalone(), ConfigError, "--standalone runs one node; it cannot be elastic");
    DPT_CHECK(options.on_failure() == OnFailure::Restart, ConfigError, "--on-failure continue keeps the ranks of a ",
              "fixed world going; an elastic job (--nnodes MIN:MAX) re-forms through its launchers instead");
    options.node_rank(0);  // the rendezvous assigns it, round by round
  }
  DPT_CHECK(options.node_rank() >= 0 && options.node_rank() < options.nnodes(), ConfigError, "--node-rank ",
            options.node_rank(), " is outside 0..", options.nnodes() - 1, " for --nnodes ", options.nnodes());
  DPT_CHECK(options.max_restarts() >= 0, ConfigError, "--max-restarts must not be negative");
  const auto& gpus = options.gpus();
  for (int gpu : gpus) DPT_CHECK(gpu >= 0, ConfigError, "--gpus: GPU index ", gpu, " is negative");
  if (!options.nproc_per_node()) {
    if (!gpus.empty()) {
      options.nproc_per_node(static_cast<int>(gpus.size()));
    } else if (int devices = static_cast<int>(visible_gpus(env).size()); devices > 0) {
      options.nproc_per_node(devices);
    } else {
      options.nproc_per_node(usable_cores());
    }
  }
  const int nproc = *options.nproc_per_node();
  DPT_CHECK(nproc >= 1, ConfigError, "--nproc-per-node must be at least 1, got ", nproc);
  // A mistyped count would otherwise fork that many workers.
  DPT_CHECK(nproc <= kMaxWorkersPerNode, ConfigError, "--nproc-per-node ", nproc, " is more workers than one node runs (at most ",
            kMaxWorkersPerNode, ")");
  DPT_CHECK(gpus.empty() || static_cast<int>(gpus.size()) == nproc, ConfigError, "--gpus lists ", gpus.size(),
            " GPU(s) but --nproc-per-node is ", nproc, "; give one GPU per local worker");
  if (options.standalone()) {
    DPT_CHECK(options.nnodes() == 1, ConfigError, "--standalone runs one node; drop --nnodes ", options.nnodes());
    options.master_addr("127.0.0.1");
    options.master_port(free_port("127.0.0.1"));
  }
  DPT_CHECK(options.master_port() > 0 && options.master_port() < 65536, ConfigError, "--master-port ",
            options.master_port(), " is not a TCP port");
  if (!options.etcd_endpoints().empty()) {
    DPT_CHECK(options.on_failure() == OnFailure::Continue && !options.min_nnodes(), ConfigError,
              "--rdzv-backend etcd keeps the workers' store of an --on-failure continue job (a restart starts ",
              "every worker again, with rank 0's store); add --on-failure continue, without --nnodes MIN:MAX");
    // Each node's workers find the job's keys under its run id: every node must name the same.
    DPT_CHECK(options.nnodes() == 1 || !options.run_id().empty() || env.has("TORCHELASTIC_RUN_ID"), ConfigError,
              "--rdzv-backend etcd with --nnodes ", options.nnodes(), " needs the job's --rdzv-id, the same on ",
              "every node (its keys in etcd are kept under it)");
  }
  if (options.run_id().empty()) options.run_id(env.get("TORCHELASTIC_RUN_ID").value_or(fresh_run_id()));
  if (!options.job_token()) {
    if (auto given = env.get(kJobTokenVariable)) {
      options.job_token(*given);
    } else if (options.nnodes() == 1) {
      // Every process of a one-node job starts here, so it can be told a secret nobody else has.
      options.job_token(make_job_token());
    }
  }
  DPT_CHECK(!options.job_token() || !options.job_token()->empty(), ConfigError, "the job token is empty (",
            kJobTokenVariable, " or --job-token): give every node the same non-empty token");
  return options;
}

void check_program(const std::vector<std::string>& program) {
  DPT_CHECK(!program.empty(), ConfigError, "no program to launch; put it after '--'");
}

std::vector<WorkerSpec> make_worker_specs(const LaunchOptions& options, const std::vector<std::string>& program,
                                          const Environment& base, int restart_count) {
  check_program(program);
  DPT_ASSERT(options.nproc_per_node().has_value(), "launch options must be resolved first");
  const int nproc = *options.nproc_per_node();
  const int world = nproc * options.nnodes();
  const std::vector<int> usable = usable_cpus();
  const std::vector<std::vector<int>> blocks =
      options.cpu_bind() == CpuBind::Cores ? split_cpus(usable, nproc) : std::vector<std::vector<int>>{};
  const std::string threads = std::to_string(std::max(1, static_cast<int>(usable.size()) / nproc));
  std::optional<std::filesystem::path> log_dir;
  if (options.log_dir()) {
    log_dir = std::filesystem::path(*options.log_dir()) / ("attempt_" + std::to_string(restart_count));
    std::error_code error;
    std::filesystem::create_directories(*log_dir, error);
    DPT_CHECK(!error, ConfigError, "cannot create the log folder '", log_dir->string(), "': ", error.message());
  }

  std::vector<WorkerSpec> specs;
  for (int local = 0; local < nproc; ++local) {
    const int rank = options.node_rank() * nproc + local;
    auto env = base.vars();
    auto set = [&env](const std::string& key, const std::string& value) { env[key] = value; };
    set("RANK", std::to_string(rank));
    set("LOCAL_RANK", std::to_string(local));
    set("WORLD_SIZE", std::to_string(world));
    set("LOCAL_WORLD_SIZE", std::to_string(nproc));
    set("GROUP_RANK", std::to_string(options.node_rank()));
    set("GROUP_WORLD_SIZE", std::to_string(options.nnodes()));
    set("ROLE_NAME", "default");
    set("ROLE_RANK", std::to_string(rank));
    set("ROLE_WORLD_SIZE", std::to_string(world));
    set("MASTER_ADDR", options.master_addr());
    set("MASTER_PORT", std::to_string(options.master_port()));
    set("TORCHELASTIC_RESTART_COUNT", std::to_string(restart_count));
    set("TORCHELASTIC_MAX_RESTARTS", std::to_string(options.max_restarts()));
    set("TORCHELASTIC_RUN_ID", options.run_id());
    // The workers host their own store (rank 0), as with init_process_group outside torchrun; under
    // --on-failure continue node 0's launcher serves it (launch_serving_store), as torchrun's agent
    // does, so that the ranks left can meet in it after losing any rank, rank 0 included.
    set("TORCHELASTIC_USE_AGENT_STORE", options.on_failure() == OnFailure::Continue ? "True" : "False");
    if (options.job_token()) set(kJobTokenVariable, *options.job_token());
    if (options.on_failure() == OnFailure::Continue) set(kKeepsSurvivorsVariable, "1");
    if (!options.etcd_endpoints().empty()) {
      std::string endpoints;
      for (const auto& endpoint : options.etcd_endpoints()) endpoints += (endpoints.empty() ? "" : ",") + endpoint;
      set(kEtcdEndpointsVariable, endpoints);
    }
    if (!base.has("OMP_NUM_THREADS")) {
      set("OMP_NUM_THREADS", blocks.empty() ? threads : std::to_string(blocks[local].size()));
    }
    if (!options.gpus().empty()) {
      set("CUDA_VISIBLE_DEVICES", std::to_string(options.gpus()[local]));
      set("DPTRAIN_OWN_GPUS", "1");  // that one GPU is this worker's alone (dist/backend_choice.h)
    }

    WorkerSpec spec;
    spec.name = "rank " + std::to_string(rank);
    spec.argv = program;
    spec.env = std::move(env);
    if (log_dir) spec.log_path = (*log_dir / ("rank_" + std::to_string(rank) + ".log")).string();
    if (!blocks.empty()) spec.cpus = blocks[local];
    specs.push_back(std::move(spec));
  }
  return specs;
}

std::string describe_workers(const LaunchOptions& options) {
  const int nproc = *options.nproc_per_node();
  const int first = options.node_rank() * nproc;
  std::string text = str("dptrain launch: ", nproc, " worker(s) on node ", options.node_rank(), " of ", options.nnodes(),
                         " (ranks ", first, "..", first + nproc - 1, " of ", nproc * options.nnodes(), "), master ",
                         options.master_addr(), ":", options.master_port(), ", run id ", options.run_id(), "\n");
  if (!options.job_token()) {
    text += "dptrain launch: no job token: any process that reaches the master's port can join this job; give every "
            "node the same --job-token FILE (docs/security.md)\n";
  }
  if (options.cpu_bind() == CpuBind::Cores) {
    const auto blocks = split_cpus(usable_cpus(), nproc);
    std::string placement;
    for (const auto& block : blocks) placement += (placement.empty() ? "" : " | ") + describe_cpus(block);
    text += str("dptrain launch: ",
                blocks.empty() ? "fewer CPUs than workers, so the workers are not pinned"
                               : "worker CPUs (local rank order): " + placement,
                "\n");
  }
  return text;
}

namespace {

// A static launch's rounds: one world, the same every time, until supervise() stops asking.
class StaticMembership : public JobMembership {
 public:
  StaticMembership(LaunchOptions options, WorkerLost on_worker_lost)
      : options_(std::move(options)), on_worker_lost_(std::move(on_worker_lost)) {}
  std::optional<Round> next_round() override { return Round{options_, rounds_++}; }
  // A stop signal that reached the workers was for the job: their checkpoint is for a later job.
  bool stop_on_request_ends_job() const override { return true; }
  void worker_lost(int round, int rank) override {
    if (on_worker_lost_) on_worker_lost_(round, rank);
  }

 private:
  LaunchOptions options_;
  WorkerLost on_worker_lost_;
  int rounds_ = 0;
};

}  // namespace

int launch(const LaunchOptions& requested, const std::vector<std::string>& program, const Environment& env) {
  DPT_CHECK(!requested.min_nnodes(), ConfigError, "an elastic launch (--nnodes MIN:MAX) runs in dptrain-torch; ",
            "call dpt::launch::launch_elastic");
  DPT_CHECK(requested.on_failure() == OnFailure::Restart, ConfigError, "--on-failure continue needs the workers' ",
            "store served by the launcher, which runs in dptrain-torch; call dpt::launch::launch_serving_store");
  return launch_fixed_world(resolve(requested, env), program, env);
}

int launch_fixed_world(const LaunchOptions& resolved, const std::vector<std::string>& program, const Environment& env,
                       WorkerLost on_worker_lost) {
  check_program(program);
  StaticMembership rounds(resolved, std::move(on_worker_lost));
  return supervise(rounds, program, env);
}

}  // namespace dpt::launch
