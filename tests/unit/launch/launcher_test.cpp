#include <gtest/gtest.h>
#include <sched.h>

#include "dptrain/common/error.h"
#include "dptrain/launch/launcher.h"

using dpt::Environment;
using dpt::launch::CpuBind;
using dpt::launch::LaunchOptions;
using dpt::launch::make_worker_specs;
using dpt::launch::resolve;
using dpt::launch::split_cpus;

TEST(Launcher, SpecsCarryTheTorchrunContractForTheirNode) {
  auto options = resolve(LaunchOptions().nproc_per_node(2).nnodes(3).node_rank(2).master_addr("10.0.0.7")
                             .master_port(1234).run_id("r1").max_restarts(4),
                         Environment());
  auto specs = make_worker_specs(options, {"prog", "--flag"}, Environment(std::map<std::string, std::string>{{"PATH", "/bin"}}), /*restart=*/1);
  ASSERT_EQ(specs.size(), 2u);
  const auto& env = specs[1].env;
  EXPECT_EQ(specs[1].name, "rank 5");
  EXPECT_EQ(specs[1].argv, (std::vector<std::string>{"prog", "--flag"}));
  EXPECT_EQ(env.at("RANK"), "5");
  EXPECT_EQ(env.at("LOCAL_RANK"), "1");
  EXPECT_EQ(env.at("WORLD_SIZE"), "6");
  EXPECT_EQ(env.at("LOCAL_WORLD_SIZE"), "2");
  EXPECT_EQ(env.at("GROUP_RANK"), "2");
  EXPECT_EQ(env.at("GROUP_WORLD_SIZE"), "3");
  EXPECT_EQ(env.at("MASTER_ADDR"), "10.0.0.7");
  EXPECT_EQ(env.at("MASTER_PORT"), "1234");
  EXPECT_EQ(env.at("TORCHELASTIC_RESTART_COUNT"), "1");
  EXPECT_EQ(env.at("TORCHELASTIC_MAX_RESTARTS"), "4");
  EXPECT_EQ(env.at("TORCHELASTIC_RUN_ID"), "r1");
  EXPECT_EQ(env.at("PATH"), "/bin");
  EXPECT_EQ(env.count("CUDA_VISIBLE_DEVICES"), 0u);
  EXPECT_EQ(env.count("DPTRAIN_OWN_GPUS"), 0u);
}

TEST(Launcher, AutoWorkerCountFollowsGpusThenVisibleDevices) {
  EXPECT_EQ(*resolve(LaunchOptions().gpus({4, 6, 5}), Environment()).nproc_per_node(), 3);
  EXPECT_EQ(*resolve(LaunchOptions(), Environment(std::map<std::string, std::string>{{"CUDA_VISIBLE_DEVICES", "0,1,2,3"}})).nproc_per_node(), 4);
  auto specs = make_worker_specs(resolve(LaunchOptions().gpus({1, 3}), Environment()), {"p"}, Environment(), 0);
  EXPECT_EQ(specs[0].env.at("CUDA_VISIBLE_DEVICES"), "1");
  EXPECT_EQ(specs[1].env.at("CUDA_VISIBLE_DEVICES"), "3");
  // Each worker's GPU is its own: NCCL may take it (dist/backend_choice.h).
  EXPECT_EQ(specs[1].env.at("DPTRAIN_OWN_GPUS"), "1");
}

TEST(Launcher, StandaloneChoosesLoopbackAndAFreePort) {
  auto options = resolve(LaunchOptions().nproc_per_node(1).standalone(true).master_addr("elsewhere"), Environment());
  EXPECT_EQ(options.master_addr(), "127.0.0.1");
  EXPECT_GT(options.master_port(), 0);
  EXPECT_FALSE(options.run_id().empty());
}

TEST(Launcher, ImpossibleOptionsAreConfigErrors) {
  EXPECT_THROW(resolve(LaunchOptions().nnodes(2).node_rank(2), Environment()), dpt::ConfigError);
  EXPECT_THROW(resolve(LaunchOptions().nproc_per_node(0), Environment()), dpt::ConfigError);
  // 9182 workers took the launcher over a second to plan under ASan (fuzz/launch_cli).
  EXPECT_EQ(*resolve(LaunchOptions().nproc_per_node(dpt::launch::kMaxWorkersPerNode), Environment()).nproc_per_node(),
            dpt::launch::kMaxWorkersPerNode);
  EXPECT_THROW(resolve(LaunchOptions().nproc_per_node(dpt::launch::kMaxWorkersPerNode + 1), Environment()),
               dpt::ConfigError);
  EXPECT_THROW(resolve(LaunchOptions().nproc_per_node(2).gpus({0}), Environment()), dpt::ConfigError);
  EXPECT_THROW(resolve(LaunchOptions().nnodes(2).standalone(true), Environment()), dpt::ConfigError);
  EXPECT_THROW(resolve(LaunchOptions().max_restarts(-1), Environment()), dpt::ConfigError);
  auto ok = resolve(LaunchOptions().nproc_per_node(1), Environment());
  EXPECT_THROW(make_worker_specs(ok, {}, Environment(), 0), dpt::ConfigError);
}

TEST(Launcher, CpusSplitIntoContiguousBlocksOnePerWorker) {
  using Blocks = std::vector<std::vector<int>>;
  EXPECT_EQ(split_cpus({0, 1}, 2), (Blocks{{0}, {1}}));
  EXPECT_EQ(split_cpus({0, 1, 2, 3, 4, 5, 6}, 3), (Blocks{{0, 1, 2}, {3, 4}, {5, 6}}));
  // An allocation's CPUs, not 0..N-1.
  EXPECT_EQ(split_cpus({2, 3, 8, 9}, 2), (Blocks{{2, 3}, {8, 9}}));
  EXPECT_EQ(split_cpus({0, 1, 2, 3}, 1), (Blocks{{0, 1, 2, 3}}));
  EXPECT_EQ(split_cpus({0, 1}, 3), Blocks{});  // fewer CPUs than workers: not pinned
}

// Each spec carries its block (and as many OpenMP threads); CpuBind::None carries none.
TEST(Launcher, SpecsCarryTheirCpusWhenBinding) {
  cpu_set_t set;
  CPU_ZERO(&set);
  ASSERT_EQ(sched_getaffinity(0, sizeof(set), &set), 0);
  std::vector<int> mine;
  for (int cpu = 0; cpu < CPU_SETSIZE; ++cpu) {
    if (CPU_ISSET(cpu, &set)) mine.push_back(cpu);
  }
  const auto options = resolve(LaunchOptions().nproc_per_node(1).run_id("x"), Environment());
  const auto bound = make_worker_specs(options, {"prog"}, Environment(), 0);
  EXPECT_EQ(bound.at(0).cpus, mine);
  EXPECT_EQ(bound.at(0).env.at("OMP_NUM_THREADS"), std::to_string(mine.size()));
  const auto unbound = make_worker_specs(LaunchOptions(options).cpu_bind(CpuBind::None), {"prog"}, Environment(), 0);
  EXPECT_TRUE(unbound.at(0).cpus.empty());
}

TEST(Launcher, AOneNodeJobMakesItsOwnTokenAndGivesItToEveryWorker) {
  const auto one = resolve(LaunchOptions().nproc_per_node(2), Environment());
  ASSERT_TRUE(one.job_token().has_value());
  EXPECT_EQ(one.job_token()->size(), 64u);
  EXPECT_NE(*resolve(LaunchOptions().nproc_per_node(2), Environment()).job_token(), *one.job_token())
      << "each job its own";
  const auto specs = make_worker_specs(one, {"p"}, Environment(), 0);
  for (const auto& spec : specs) EXPECT_EQ(spec.env.at("DPTRAIN_JOB_TOKEN"), *one.job_token());
  EXPECT_EQ(dpt::launch::describe_workers(one).find("no job token"), std::string::npos);
}

TEST(Launcher, AJobOfSeveralNodesTakesItsTokenFromTheEnvironmentOrRunsWithoutAndSaysSo) {
  const Environment with_token(std::map<std::string, std::string>{{"DPTRAIN_JOB_TOKEN", "shared"}});
  EXPECT_EQ(resolve(LaunchOptions().nproc_per_node(1).nnodes(2), with_token).job_token(), "shared");
  EXPECT_EQ(resolve(LaunchOptions().nproc_per_node(1), with_token).job_token(), "shared");
  EXPECT_EQ(resolve(LaunchOptions().nproc_per_node(1).nnodes(2).job_token("file's"), with_token).job_token(),
            "file's");
  const auto open = resolve(LaunchOptions().nproc_per_node(1).nnodes(2), Environment());
  EXPECT_FALSE(open.job_token().has_value());
  EXPECT_EQ(make_worker_specs(open, {"p"}, Environment(), 0)[0].env.count("DPTRAIN_JOB_TOKEN"), 0u);
  EXPECT_NE(dpt::launch::describe_workers(open).find("no job token: any process that reaches the master's port can "
                                                     "join this job; give every node the same --job-token FILE"),
            std::string::npos);
  EXPECT_THROW(resolve(LaunchOptions().nproc_per_node(1).job_token(""), Environment()), dpt::ConfigError);
}
