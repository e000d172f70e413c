#pragma once
// spawn: one worker process per GPU (or per requested process) running a function of this very
// program, the style of Python's torch.multiprocessing.spawn, supervised by the same WorkerGroup
// as `dptrain launch`: no orphans, the first failure named with its rank and exit status, Ctrl-C
// passed to every worker, SIGTERM then SIGKILL after the grace period.
//
//   int main(int argc, char** argv) {
//     Flags flags = parse(argc, argv);             // runs in the parent and again in every child
//     return dpt::launch::spawn([&](int local_rank) { return train(flags, local_rank); },
//                               flags.nprocs);     // std::nullopt: one per visible GPU
//   }
//   int train(const Flags& flags, int local_rank) {  // RANK, WORLD_SIZE, MASTER_ADDR/PORT are set
//     auto comm = dpt::dist::init_process_group();   // or init_method("tcp://" + addr + ":" + port)
//     torch::Device device(torch::kCUDA, local_rank);  // cuda:i, the i-th visible GPU
//     ...
//   }
//
// How a child reaches the function. Forking a process that runs LibTorch is unsafe: its intra-op
// pool, Gloo's threads or a CUDA context may hold locks and cannot be rebuilt in the child, and
// "fork before anything starts a thread" is a promise no library can check. So spawn() forks and
// immediately execs this program again (/proc/self/exe, the same arguments) with
// DPTRAIN_SPAWN_LOCAL_RANK set: the child is a fresh process that runs main() from the start, and
// when it reaches spawn() it finds that variable, removes it, runs fn(local_rank) and exits with
// fn's result. Consequences: everything before spawn() runs in every child too (parse flags there,
// start nothing heavy before it), and spawn() is reached the same way in every run of the program.
//
// GPU subsets: with CUDA_VISIBLE_DEVICES=1,3 the workers inherit it unchanged, nprocs defaults to
// 2, and local rank i uses cuda:i, the i-th visible GPU (physical 1 and 3), never cuda:<physical
// id> (cuda:3 does not exist in such a process). On a machine without GPUs, give nprocs.

#include <chrono>
#include <functional>
#include <optional>
#include <string>
#include <vector>

#include <torch/arg.h>

#include "dptrain/common/environment.h"
#include "dptrain/launch/worker_group.h"

namespace dpt::launch {

// Set in each child to its local rank; spawn() in a process that has it runs the function.
constexpr const char* kSpawnLocalRankVariable = "DPTRAIN_SPAWN_LOCAL_RANK";

// What a worker runs: its local rank in, its exit code out. An exception ends the worker with
// code 1 after printing "rank R: " and its message.
using SpawnFunction = std::function<int(int local_rank)>;

struct SpawnOptions {
  // Nodes in the job and this node's index among them (each node runs its own spawn()); global
  // rank = node_rank * nprocs + local rank.
  TORCH_ARG(int, nnodes) = 1;
  TORCH_ARG(int, node_rank) = 0;
  // Where rank 0 listens for the rendezvous. Unset port: a free port on 127.0.0.1 (one node only).
  TORCH_ARG(std::string, master_addr) = "127.0.0.1";
  TORCH_ARG(std::optional<int>, master_port) = std::nullopt;
  // Between SIGTERM and SIGKILL when stopping workers.
  TORCH_ARG(std::chrono::milliseconds, grace_period) = std::chrono::seconds(5);
  // When set, each worker's output goes to LOG_DIR/attempt_0/rank_R.log instead of the terminal.
  TORCH_ARG(std::optional<std::string>, log_dir) = std::nullopt;
};

// Who runs where, decided before anything starts.
struct SpawnPlan {
  int nprocs = 0;
  // The GPUs the workers see (CUDA_VISIBLE_DEVICES entries, inherited unchanged); local rank i
  // uses cuda:i, which is gpus[i]. Empty on a machine without GPUs.
  std::vector<std::string> gpus;

  // cuda:<index> for `local_rank`: its position among the visible GPUs; nullopt when fewer GPUs
  // are visible than that (the worker then runs on the CPU).
  std::optional<int> cuda_index(int local_rank) const;
  // "2 worker(s), GPUs visible to them: 1,3 (local rank i uses cuda:i)".
  std::string describe() const;
};

// `nprocs` given, or one per visible GPU. Throws ConfigError when neither gives at least one.
SpawnPlan plan_spawn(std::optional<int> nprocs, const Environment& env);

// The workers' specs: the torchrun environment of `dptrain launch` (RANK, LOCAL_RANK, WORLD_SIZE,
// MASTER_ADDR, MASTER_PORT, ...) plus DPTRAIN_SPAWN_LOCAL_RANK, running `program` (this program's
// path and arguments). An unset master port is chosen here.
std::vector<WorkerSpec> make_spawn_specs(const SpawnPlan& plan, const SpawnOptions& options,
                                         const std::vector<std::string>& program, const Environment& env);

// In the parent: starts plan_spawn(nprocs)'s workers and supervises them; returns 0, the first
// failing worker's exit code, or 128 + signal after Ctrl-C or SIGTERM (130, 143), having printed
// what happened to stderr. In a child (DPTRAIN_SPAWN_LOCAL_RANK set): runs fn and exits; it does
// not return.
int spawn(const SpawnFunction& fn, std::optional<int> nprocs, const SpawnOptions& options = SpawnOptions());

}  // namespace dpt::launch
