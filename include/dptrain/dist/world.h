#pragma once
// Who am I: this process's place in the job, found from flags or from whatever started it.
//
//   auto world = dpt::dist::detect_world(dpt::Environment::current(), overrides);
//   // world.rank, world.world_size, world.local_rank, world.master_addr, ...
//
// Sources, first match wins: explicit flags (WorldOverrides); the torchrun contract (RANK and
// WORLD_SIZE); Slurm (SLURM_PROCID and SLURM_NTASKS); OpenMPI (OMPI_COMM_WORLD_RANK/_SIZE);
// otherwise a single process. Flags given alongside an environment override its fields one by one.

#include <optional>
#include <string>
#include <vector>

#include "dptrain/common/environment.h"

namespace dpt::dist {

enum class WorldSource { Flags, Torchrun, Slurm, OpenMPI, Single };
std::string to_string(WorldSource source);

// The default rendezvous port, the same as PyTorch's.
constexpr int kDefaultMasterPort = 29500;
// Under Slurm without MASTER_PORT: kSlurmPortBase + SLURM_JOB_ID % kSlurmPortRange, below Linux's
// ephemeral ports, so that two jobs on one node do not collide.
constexpr int kSlurmPortBase = 15000;
constexpr int kSlurmPortRange = 10000;

// Where a rendezvous store listens.
struct StoreAddress {
  std::string host;
  int port = 0;
};

struct WorldInfo {
  int rank = 0;               // global rank, 0..world_size-1
  int world_size = 1;         // processes in the job
  int local_rank = 0;         // rank among the processes on this node
  int local_world_size = 1;   // processes on this node
  int node_rank = 0;          // this node's index (torchrun's GROUP_RANK)
  std::string master_addr = "127.0.0.1";  // host of rank 0's rendezvous store
  int master_port = kDefaultMasterPort;   // port of that store
  WorldSource source = WorldSource::Single;  // where the values above came from
  // Where torchrun's agent already hosts a store: the MASTER_ADDR:MASTER_PORT torchrun gave, when
  // TORCHELASTIC_USE_AGENT_STORE is "True" (its default since PyTorch 1.9). A rendezvous there joins
  // it as a client, every rank under a key prefix of its own restart round, instead of rank 0
  // listening on a port the agent holds; one anywhere else (an address given by flags, a tcp:// or
  // file:// init method) uses a store of the job's own.
  std::optional<StoreAddress> agent_store;
  int restart_count = 0;  // TORCHELASTIC_RESTART_COUNT: rounds of workers before this one
  // DPTRAIN_RDZV_ETCD: the etcd members (host:port) that hold the job's store, which then outlives
  // every process and machine of the job (etcd_store.h); its keys are under the run id's prefix.
  std::vector<std::string> etcd_endpoints;
  std::string run_id;  // TORCHELASTIC_RUN_ID
  // Whether the job's store outlives the ranks that joined it: a launcher's, or an etcd cluster.
  bool store_outlives_ranks() const { return agent_store.has_value() || !etcd_endpoints.empty(); }
  // DPTRAIN_REPLACEMENT=1: its launcher started it in place of a worker lost under --on-failure
  // continue, so it joins the group that went on (init.h's join_running_group), not a rendezvous.
  bool replacement = false;

  bool is_distributed() const { return world_size > 1; }
  // Whether torchrun's agent hosts the store at host:port.
  bool agent_hosts(const std::string& host, int port) const {
    return agent_store && agent_store->host == host && agent_store->port == port;
  }
  // "rank 1/4 (local 1/2, node 1) from torchrun, master 10.0.0.1:29500"
  std::string describe() const;
};

// Values given on the command line; each one set overrides the environment's.
struct WorldOverrides {
  std::optional<int> rank;
  std::optional<int> world_size;
  std::optional<int> local_rank;
  std::optional<std::string> master_addr;
  std::optional<int> master_port;
};

// Finds this process's WorldInfo. Throws ConfigError for values that cannot work (rank outside
// [0, world_size), non-numeric variables, world size below 1), naming the variable or flag.
WorldInfo detect_world(const Environment& env, const WorldOverrides& flags = {});

}  // namespace dpt::dist
