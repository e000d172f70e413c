#include "dptrain/launch/spawn.h"

#include <unistd.h>

#include <cstdlib>
#include <iostream>

#include "dptrain/common/error.h"
#include "dptrain/common/read_file.h"
#include "dptrain/common/text.h"
#include "dptrain/launch/launcher.h"
#include "dptrain/launch/visible_gpus.h"

namespace dpt::launch {

namespace {

// This program as it was started: its path, then its arguments (argv[0] dropped).
std::vector<std::string> this_program() {
  std::vector<std::string> program;
  char path[4096];
  const ssize_t length = readlink("/proc/self/exe", path, sizeof(path) - 1);
  DPT_CHECK(length > 0, ConfigError, "spawn: cannot find this program's path (/proc/self/exe)");
  std::string exe(path, static_cast<size_t>(length));
  // A program rebuilt while it runs: the link names the deleted file, which only the link reaches.
  const std::string deleted = " (deleted)";
  if (exe.size() > deleted.size() && exe.compare(exe.size() - deleted.size(), deleted.size(), deleted) == 0) {
    exe = "/proc/self/exe";
  }
  program.push_back(exe);
  const std::string cmdline = read_file<std::string>("/proc/self/cmdline").value_or("");
  const auto arguments = nul_terminated_entries(cmdline);
  if (!arguments.empty()) program.insert(program.end(), arguments.begin() + 1, arguments.end());  // not argv[0]
  return program;
}

LaunchOptions launch_options(const SpawnPlan& plan, const SpawnOptions& options, const Environment& env) {
  auto launch = LaunchOptions()
                    .nproc_per_node(plan.nprocs)
                    .nnodes(options.nnodes())
                    .node_rank(options.node_rank())
                    .master_addr(options.master_addr())
                    .grace_period(options.grace_period())
                    .log_dir(options.log_dir());
  if (options.master_port()) {
    launch.master_port(*options.master_port());
  } else {
    DPT_CHECK(options.nnodes() == 1, ConfigError, "spawn: with ", options.nnodes(),
              " nodes, give the master port (every node must use the same one)");
    launch.standalone(true);
  }
  return resolve(launch, env);
}

// A child's whole life after main() reached spawn(): fn, then exit with its code.
[[noreturn]] void run_child(const SpawnFunction& fn, const std::string& marker, const Environment& env) {
  char* end = nullptr;
  const long local_rank = std::strtol(marker.c_str(), &end, 10);
  DPT_CHECK(!marker.empty() && *end == '\0' && local_rank >= 0, ConfigError, "spawn: ", kSpawnLocalRankVariable,
            "='", marker, "' is not a local rank; unset it (spawn sets it in the processes it starts)");
  // A spawn() inside fn starts a group of its own instead of taking this marker for its own.
  unsetenv(kSpawnLocalRankVariable);
  int code = 1;
  try {
    code = fn(static_cast<int>(local_rank));
  } catch (const std::exception& e) {
    std::cerr << "rank " << env.get("RANK").value_or(marker) << ": " << e.what() << std::endl;
  }
  std::cout.flush();
  std::exit(code);
}

}  // namespace

std::optional<int> SpawnPlan::cuda_index(int local_rank) const {
  if (local_rank < 0 || local_rank >= static_cast<int>(gpus.size())) return std::nullopt;
  return local_rank;
}

std::string SpawnPlan::describe() const {
  if (gpus.empty()) return str(nprocs, " worker(s), no GPU visible");
  std::string listed;
  for (const auto& gpu : gpus) listed += (listed.empty() ? "" : ",") + gpu;
  return str(nprocs, " worker(s), GPUs visible to them: ", listed, " (local rank i uses cuda:i)");
}

SpawnPlan plan_spawn(std::optional<int> nprocs, const Environment& env) {
  SpawnPlan plan;
  plan.gpus = visible_gpus(env);
  if (nprocs) {
    DPT_CHECK(*nprocs >= 1, ConfigError, "spawn: nprocs must be at least 1, got ", *nprocs);
    plan.nprocs = *nprocs;
  } else {
    DPT_CHECK(!plan.gpus.empty(), ConfigError,
              "spawn: no GPU is visible to start one worker per GPU; give the number of processes (nprocs)");
    plan.nprocs = static_cast<int>(plan.gpus.size());
  }
  return plan;
}

std::vector<WorkerSpec> make_spawn_specs(const SpawnPlan& plan, const SpawnOptions& options,
                                         const std::vector<std::string>& program, const Environment& env) {
  auto specs = make_worker_specs(launch_options(plan, options, env), program, env, /*restart_count=*/0);
  for (auto& spec : specs) spec.env[kSpawnLocalRankVariable] = spec.env.at("LOCAL_RANK");
  return specs;
}

int spawn(const SpawnFunction& fn, std::optional<int> nprocs, const SpawnOptions& options) {
  const Environment env = Environment::current();
  if (auto marker = env.get(kSpawnLocalRankVariable)) run_child(fn, *marker, env);

  const SpawnPlan plan = plan_spawn(nprocs, env);
  auto specs = make_spawn_specs(plan, options, this_program(), env);
  std::cerr << "spawn: " << plan.describe() << "; rendezvous tcp://" << specs[0].env.at("MASTER_ADDR") << ":"
            << specs[0].env.at("MASTER_PORT") << std::endl;
  WorkerGroup group(std::move(specs), SupervisorOptions().grace_period(options.grace_period()));
  const GroupResult result = group.run();
  if (!result.succeeded()) std::cerr << "spawn: " << result.report() << std::endl;
  return result.exit_code;
}

}  // namespace dpt::launch
