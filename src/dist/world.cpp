#include "dptrain/dist/world.h"

#include <algorithm>
#include <cctype>
#include <climits>
#include <sstream>

#include "dptrain/common/error.h"
#include "dptrain/common/on_failure.h"
#include "dptrain/dist/node_list.h"

namespace dpt::dist {

std::string to_string(WorldSource source) {
  switch (source) {
    case WorldSource::Flags: return "flags";
    case WorldSource::Torchrun: return "torchrun environment";
    case WorldSource::Slurm: return "Slurm";
    case WorldSource::OpenMPI: return "OpenMPI";
    case WorldSource::Single: return "single process";
  }
  return "unknown";
}

std::string WorldInfo::describe() const {
  return str("rank ", rank, "/", world_size, " (local ", local_rank, "/", local_world_size, ", node ",
             node_rank, ") from ", to_string(source), ", master ", master_addr, ":", master_port,
             agent_hosts(master_addr, master_port) ? " (torchrun's agent store)" : "");
}

namespace {

// `name` as an int, or nullopt when unset; ConfigError when it is not a number or does not fit.
std::optional<int> get_int32(const Environment& env, const std::string& name) {
  auto value = env.get_int(name);
  if (!value) return std::nullopt;
  DPT_CHECK(*value >= INT_MIN && *value <= INT_MAX, ConfigError, "environment variable ", name, "='",
            *env.get(name), "' is out of range");
  return static_cast<int>(*value);
}

int require_int(const Environment& env, const std::string& name) {
  auto value = get_int32(env, name);
  DPT_ASSERT(value.has_value(), name, " checked before use");
  return *value;
}

int int_or(const Environment& env, const std::string& name, int fallback) {
  return get_int32(env, name).value_or(fallback);
}

// The number that `text` starts with ("2" of "2(x3),1"), for counts a launcher writes: at most
// nine digits, so that it fits an int.
int leading_count(const std::string& text, const std::string& what) {
  const size_t digits = text.find_first_not_of("0123456789");
  const std::string number = text.substr(0, digits);
  DPT_CHECK(!number.empty() && number.size() <= 9, ConfigError, what, " '", text, "' does not start with a count");
  return std::stoi(number);
}

// A process's place as a launcher's variables `rank` and `world_size` give it (checked present).
WorldInfo placed(const Environment& env, WorldSource source, const char* rank, const char* world_size) {
  WorldInfo w;
  w.source = source;
  w.rank = require_int(env, rank);
  w.world_size = require_int(env, world_size);
  return w;
}

// DPTRAIN_RDZV_ETCD's members, "h1:2379,h2:2379"; ConfigError for an empty entry.
std::vector<std::string> etcd_endpoints_of(const std::string& list) {
  std::vector<std::string> endpoints;
  std::istringstream in(list);
  for (std::string endpoint; std::getline(in, endpoint, ',');) {
    DPT_CHECK(!endpoint.empty(), ConfigError, kEtcdEndpointsVariable, "='", list, "' has an empty entry: give ",
              "host:port[,host:port...]");
    endpoints.push_back(endpoint);
  }
  DPT_CHECK(!endpoints.empty(), ConfigError, kEtcdEndpointsVariable, " is set but names no etcd member");
  return endpoints;
}

// Torchrun and `dptrain launch` set all of these; plain `RANK=1 WORLD_SIZE=2 prog` sets two.
WorldInfo from_torchrun(const Environment& env) {
  WorldInfo w = placed(env, WorldSource::Torchrun, "RANK", "WORLD_SIZE");
  w.local_rank = int_or(env, "LOCAL_RANK", w.rank);
  w.local_world_size = int_or(env, "LOCAL_WORLD_SIZE", w.world_size);
  w.node_rank = int_or(env, "GROUP_RANK", 0);
  w.master_addr = env.get("MASTER_ADDR").value_or(w.master_addr);
  w.master_port = int_or(env, "MASTER_PORT", kDefaultMasterPort);
  if (env.get("TORCHELASTIC_USE_AGENT_STORE").value_or("") == "True") {
    w.agent_store = StoreAddress{w.master_addr, w.master_port};
  }
  w.restart_count = int_or(env, "TORCHELASTIC_RESTART_COUNT", 0);
  w.replacement = env.get(kReplacementVariable).value_or("0") == "1";
  if (const auto etcd = env.get(kEtcdEndpointsVariable)) w.etcd_endpoints = etcd_endpoints_of(*etcd);
  w.run_id = env.get("TORCHELASTIC_RUN_ID").value_or("");
  return w;
}

// SLURM_TASKS_PER_NODE looks like "2(x3),1": the first entry is this node's count only when nodes
// are uniform, so prefer SLURM_NTASKS_PER_NODE, then the per-node step layout, then a fair split.
int slurm_local_world_size(const Environment& env, int world_size) {
  if (auto per_node = get_int32(env, "SLURM_NTASKS_PER_NODE")) return *per_node;
  if (auto tasks = env.get("SLURM_STEP_TASKS_PER_NODE").value_or(env.get("SLURM_TASKS_PER_NODE").value_or(""));
      !tasks.empty() && std::isdigit(static_cast<unsigned char>(tasks[0]))) {
    return leading_count(tasks, "Slurm's tasks per node");
  }
  int nodes = int_or(env, "SLURM_JOB_NUM_NODES", int_or(env, "SLURM_NNODES", 1));
  return std::max(1, world_size / std::max(1, nodes));
}

WorldInfo from_slurm(const Environment& env) {
  WorldInfo w = placed(env, WorldSource::Slurm, "SLURM_PROCID", "SLURM_NTASKS");
  w.local_rank = int_or(env, "SLURM_LOCALID", 0);
  w.local_world_size = slurm_local_world_size(env, w.world_size);
  w.node_rank = int_or(env, "SLURM_NODEID", 0);
  // An explicit MASTER_ADDR (set in the sbatch script) wins over the node list's first host.
  if (auto addr = env.get("MASTER_ADDR")) {
    w.master_addr = *addr;
  } else if (auto nodes = env.get("SLURM_STEP_NODELIST").value_or(env.get("SLURM_JOB_NODELIST").value_or(""));
             !nodes.empty()) {
    w.master_addr = NodeList(nodes).front();
  }
  // Jobs sharing a node must not all listen on 29500: without MASTER_PORT the port follows the
  // job id, the same on every task of the job.
  const int job_port = static_cast<int>(kSlurmPortBase + int_or(env, "SLURM_JOB_ID", 0) % kSlurmPortRange);
  w.master_port = int_or(env, "MASTER_PORT", env.has("SLURM_JOB_ID") ? job_port : kDefaultMasterPort);
  return w;
}

WorldInfo from_openmpi(const Environment& env) {
  WorldInfo w = placed(env, WorldSource::OpenMPI, "OMPI_COMM_WORLD_RANK", "OMPI_COMM_WORLD_SIZE");
  w.local_rank = int_or(env, "OMPI_COMM_WORLD_LOCAL_RANK", 0);
  w.local_world_size = int_or(env, "OMPI_COMM_WORLD_LOCAL_SIZE", w.world_size);
  // Not OMPI_COMM_WORLD_NODE_RANK: that is the process's rank among all jobs' processes on its
  // node, not the node's index. mpirun fills nodes in order (--map-by slot) by default.
  w.node_rank = w.rank / std::max(1, w.local_world_size);
  w.master_addr = env.get("MASTER_ADDR").value_or("127.0.0.1");
  w.master_port = int_or(env, "MASTER_PORT", kDefaultMasterPort);
  return w;
}

void apply(const WorldOverrides& flags, WorldInfo& w) {
  bool any = flags.rank || flags.world_size || flags.local_rank || flags.master_addr || flags.master_port;
  if (flags.rank) w.rank = *flags.rank;
  if (flags.world_size) w.world_size = *flags.world_size;
  if (flags.local_rank) w.local_rank = *flags.local_rank;
  if (flags.master_addr) w.master_addr = *flags.master_addr;
  if (flags.master_port) w.master_port = *flags.master_port;
  if (any && w.source == WorldSource::Single) {
    w.source = WorldSource::Flags;
    if (!flags.local_rank) w.local_rank = w.rank;
    w.local_world_size = w.world_size;
  }
}

void validate(const WorldInfo& w) {
  const std::string from = " (from " + to_string(w.source) + ")";
  DPT_CHECK(w.world_size >= 1, ConfigError, "world size must be at least 1, got ", w.world_size, from);
  DPT_CHECK(w.rank >= 0 && w.rank < w.world_size, ConfigError, "rank ", w.rank,
            " is outside the world of ", w.world_size, " processes (valid ranks: 0..", w.world_size - 1,
            ")", from, ". Check --rank/--world-size or RANK/WORLD_SIZE.");
  DPT_CHECK(w.local_rank >= 0 && w.local_rank < std::max(w.local_world_size, 1), ConfigError,
            "local rank ", w.local_rank, " is outside the ", w.local_world_size,
            " processes on this node", from, ". Check LOCAL_RANK/LOCAL_WORLD_SIZE.");
  DPT_CHECK(w.master_port > 0 && w.master_port < 65536, ConfigError, "master port ", w.master_port,
            " is not a TCP port (1..65535)", from, ". Check --master-port or MASTER_PORT.");
  DPT_CHECK(!w.master_addr.empty(), ConfigError, "master address is empty", from,
            ". Set --master-addr or MASTER_ADDR.");
}

}  // namespace

WorldInfo detect_world(const Environment& env, const WorldOverrides& flags) {
  WorldInfo w;
  if (env.has("RANK") && env.has("WORLD_SIZE")) {
    w = from_torchrun(env);
  } else if (env.has("SLURM_PROCID") && env.has("SLURM_NTASKS")) {
    w = from_slurm(env);
  } else if (env.has("OMPI_COMM_WORLD_RANK") && env.has("OMPI_COMM_WORLD_SIZE")) {
    w = from_openmpi(env);
  } else {
    w.master_addr = env.get("MASTER_ADDR").value_or(w.master_addr);
    w.master_port = int_or(env, "MASTER_PORT", kDefaultMasterPort);
  }
  apply(flags, w);
  validate(w);
  return w;
}

}  // namespace dpt::dist
