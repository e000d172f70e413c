#pragma once
// A torchrun for any program: starts the local workers of one node with the torchrun environment,
// supervises them (see worker_group.h), and restarts the local group on failure when asked.
//
//   auto options = dpt::launch::LaunchOptions().nproc_per_node(2).standalone(true);
//   int code = dpt::launch::launch(options, {"python3", "train.py"}, dpt::Environment::current());

#include <chrono>
#include <functional>
#include <optional>
#include <string>
#include <vector>

#include <torch/arg.h>

#include "dptrain/common/on_failure.h"
#include "dptrain/common/environment.h"
#include "dptrain/launch/worker_group.h"

namespace dpt::launch {

// Where the local workers run on the CPUs this launcher may use.
enum class CpuBind {
  None,   // anywhere: the kernel moves them between cores
  Cores,  // each worker pinned to its own contiguous block of those CPUs
};

struct LaunchOptions {
  // Workers on this node; unset ("auto"): one per --gpus entry, else per visible GPU, else per core.
  TORCH_ARG(std::optional<int>, nproc_per_node) = std::nullopt;
  // Nodes in the job, and this node's index among them. With min_nnodes the job is elastic:
  // between min_nnodes and nnodes nodes, whose ranks a rendezvous among the launchers assigns
  // (launch_elastic; node_rank is then unused).
  TORCH_ARG(int, nnodes) = 1;
  TORCH_ARG(int, node_rank) = 0;
  TORCH_ARG(std::optional<int>, min_nnodes) = std::nullopt;
  // Elastic only: once min_nnodes have joined a round, how long it stays open for more.
  TORCH_ARG(std::chrono::milliseconds, last_call) = std::chrono::seconds(10);
  // Elastic only: how long a round may wait for min_nnodes.
  TORCH_ARG(std::chrono::milliseconds, rendezvous_timeout) = std::chrono::minutes(5);
  // Where rank 0 listens for the rendezvous.
  TORCH_ARG(std::string, master_addr) = "127.0.0.1";
  TORCH_ARG(int, master_port) = 29500;
  // One node on loopback with a free port chosen here (overrides the three fields above).
  TORCH_ARG(bool, standalone) = false;
  // How often the whole local group is restarted after a failure.
  TORCH_ARG(int, max_restarts) = 0;
  // Continue: a worker that fails leaves the others running (they re-form without it, as
  // `dptrain train --on-failure continue` does); the group fails only when every worker has.
  TORCH_ARG(OnFailure, on_failure) = OnFailure::Restart;
  // Continue only: the etcd cluster (its members' host:port) that holds the workers' store
  // (--rdzv-backend etcd --rdzv-endpoint), under the run id's prefix, so that the job outlives
  // every machine, node 0's included; each node's launcher marks its failed workers there. Empty:
  // node 0's launcher serves the store.
  TORCH_ARG(std::vector<std::string>, etcd_endpoints) = {};
  // When set, each worker's output goes to LOG_DIR/attempt_K/rank_R.log instead of the terminal.
  TORCH_ARG(std::optional<std::string>, log_dir) = std::nullopt;
  // GPU indices; local rank i sees only the i-th (CUDA_VISIBLE_DEVICES), so subsets like 1,3 work.
  TORCH_ARG(std::vector<int>, gpus) = {};
  // The job's secret, exported to the workers as DPTRAIN_JOB_TOKEN and checked before any process
  // joins the job (dist/admission.h). Unset: DPTRAIN_JOB_TOKEN from the launcher's environment;
  // else a fresh one for a job of one node; a job of several nodes then runs without one, and any
  // process that reaches the master's port may join it (`--job-token FILE` on every node fixes that).
  TORCH_ARG(std::optional<std::string>, job_token) = std::nullopt;
  // Exported as TORCHELASTIC_RUN_ID; default: a fresh id per launch.
  TORCH_ARG(std::string, run_id) = "";
  // Between SIGTERM and SIGKILL when stopping workers.
  TORCH_ARG(std::chrono::milliseconds, grace_period) = std::chrono::seconds(5);
  // Pinning each worker to its own cores (what Open MPI's mpirun does by default) keeps the kernel
  // from moving it between cores, and a rank's communication threads then compete with its own
  // compute rather than a neighbour's. Skipped when there are fewer usable CPUs than workers.
  TORCH_ARG(CpuBind, cpu_bind) = CpuBind::Cores;
};

// The CPUs of `usable` (in order) split among `workers`: contiguous blocks, sizes differing by at
// most one. Empty when there are fewer CPUs than workers.
std::vector<std::vector<int>> split_cpus(const std::vector<int>& usable, int workers);

// Throws ConfigError when `program` is empty (nothing after '--'): the launch entry points check
// it before they resolve, print or rendezvous anything.
void check_program(const std::vector<std::string>& program);

// The environment of each local worker for one attempt: `base` plus the torchrun contract (RANK,
// LOCAL_RANK, WORLD_SIZE, LOCAL_WORLD_SIZE, GROUP_RANK, GROUP_WORLD_SIZE, ROLE_*, MASTER_ADDR,
// MASTER_PORT, TORCHELASTIC_*), OMP_NUM_THREADS when unset (the worker's share of the usable
// CPUs), CUDA_VISIBLE_DEVICES with --gpus, and the CPUs to pin it to with CpuBind::Cores.
// Throws ConfigError for options that cannot work together. `options` must be resolved.
std::vector<WorkerSpec> make_worker_specs(const LaunchOptions& options, const std::vector<std::string>& program,
                                          const Environment& base, int restart_count);

// The most workers one launcher starts: past the hardware threads of the largest two-socket servers
// (768), and planning more took the launcher a second under AddressSanitizer.
constexpr int kMaxWorkersPerNode = 1024;

// Fills in what the user left to the launcher: nproc_per_node, standalone's address and port,
// the run id, the job token. Checks the rest.
LaunchOptions resolve(LaunchOptions options, const Environment& env);

// The lines the launcher prints as it starts a group: where the workers go (ranks, master, CPUs).
// `options` must be resolved.
std::string describe_workers(const LaunchOptions& options);

// A port that is free on `address` (one of this host's) at the moment of asking.
int free_port(const std::string& address);
// Whether `address` (a name or a number) is one of this host's, i.e. a socket can bind to it.
bool is_local_address(const std::string& address);

// Runs `program` as the local workers until they finish, restarting up to max_restarts times.
// Elastic options (min_nnodes) need launch_elastic, and OnFailure::Continue launch_serving_store
// (elastic_launch.h, in the LibTorch library). Prints what happened to stderr; returns the exit
// code for the launcher (0, the failing worker's code, or 128 + signal).
int launch(const LaunchOptions& options, const std::vector<std::string>& program, const Environment& env);

// Told, under OnFailure::Continue, that the worker of global rank `rank` failed in round `round`
// while the others go on.
using WorkerLost = std::function<void(int round, int rank)>;

// launch()'s rounds, for `resolved` options (resolve()), whatever their on_failure: for a launcher
// that prepares something around them (launch_serving_store serves the workers' store first, and
// writes each worker it lost there).
int launch_fixed_world(const LaunchOptions& resolved, const std::vector<std::string>& program, const Environment& env,
                       WorkerLost on_worker_lost = {});

}  // namespace dpt::launch
