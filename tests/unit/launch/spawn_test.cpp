#include <gtest/gtest.h>

#include "dptrain/common/error.h"
#include "dptrain/launch/spawn.h"
#include "dptrain/launch/visible_gpus.h"

using dpt::Environment;
using dpt::launch::plan_spawn;
using dpt::launch::SpawnOptions;

namespace {

Environment with(std::map<std::string, std::string> vars) { return Environment(std::move(vars)); }

}  // namespace

TEST(Spawn, VisibleGpusAreTheEntriesOfCudaVisibleDevices) {
  EXPECT_EQ(dpt::launch::visible_gpus(with({{"CUDA_VISIBLE_DEVICES", "1,3"}})), (std::vector<std::string>{"1", "3"}));
  EXPECT_EQ(dpt::launch::visible_gpus(with({{"CUDA_VISIBLE_DEVICES", "GPU-5e1f"}})),
            (std::vector<std::string>{"GPU-5e1f"}));
  EXPECT_TRUE(dpt::launch::visible_gpus(with({{"CUDA_VISIBLE_DEVICES", ""}})).empty());
}

// The tutorial's bug: with CUDA_VISIBLE_DEVICES=1,3 a worker must use cuda:0 and cuda:1 (the
// positions in the list), not cuda:1 and cuda:3 (the physical ids, of which cuda:3 does not exist).
TEST(Spawn, LocalRankIUsesTheIthVisibleGpuNeverItsPhysicalId) {
  const auto plan = plan_spawn(std::nullopt, with({{"CUDA_VISIBLE_DEVICES", "1,3"}}));
  EXPECT_EQ(plan.nprocs, 2);
  EXPECT_EQ(plan.cuda_index(0), 0);
  EXPECT_EQ(plan.cuda_index(1), 1);
  EXPECT_EQ(plan.gpus, (std::vector<std::string>{"1", "3"}));
  EXPECT_EQ(plan.describe(), "2 worker(s), GPUs visible to them: 1,3 (local rank i uses cuda:i)");
  // The workers inherit the variable unchanged, so cuda:i means the same device in each of them.
  const auto specs = dpt::launch::make_spawn_specs(plan, SpawnOptions(), {"/bin/prog", "--epochs", "2"},
                                                   with({{"CUDA_VISIBLE_DEVICES", "1,3"}}));
  ASSERT_EQ(specs.size(), 2u);
  EXPECT_EQ(specs[1].env.at("CUDA_VISIBLE_DEVICES"), "1,3");
  EXPECT_EQ(specs[1].env.at("LOCAL_RANK"), "1");
}

TEST(Spawn, AGivenProcessCountWinsAndIsNeededWithoutGpus) {
  // A CPU machine where the variable happens to be set: 3 workers as asked; ranks past the list
  // have no GPU.
  const auto plan = plan_spawn(3, with({{"CUDA_VISIBLE_DEVICES", "1,3"}}));
  EXPECT_EQ(plan.nprocs, 3);
  EXPECT_EQ(plan.cuda_index(2), std::nullopt);
  EXPECT_EQ(plan_spawn(2, with({{"CUDA_VISIBLE_DEVICES", ""}})).describe(), "2 worker(s), no GPU visible");
  try {
    plan_spawn(std::nullopt, with({{"CUDA_VISIBLE_DEVICES", ""}}));
    FAIL() << "a ConfigError was expected";
  } catch (const dpt::ConfigError& e) {
    EXPECT_STREQ(e.what(),
                 "spawn: no GPU is visible to start one worker per GPU; give the number of processes (nprocs)");
  }
  EXPECT_THROW(plan_spawn(0, Environment()), dpt::ConfigError);
}

TEST(Spawn, WorkersGetTheTorchrunContractAFreeLoopbackPortAndTheirMarker) {
  const auto plan = plan_spawn(2, with({{"CUDA_VISIBLE_DEVICES", ""}}));
  const auto specs = dpt::launch::make_spawn_specs(plan, SpawnOptions(), {"/bin/prog", "-x"},
                                                   with({{"PATH", "/bin"}, {"CUDA_VISIBLE_DEVICES", ""}}));
  ASSERT_EQ(specs.size(), 2u);
  for (int local = 0; local < 2; ++local) {
    const auto& env = specs[local].env;
    EXPECT_EQ(specs[local].name, "rank " + std::to_string(local));
    EXPECT_EQ(specs[local].argv, (std::vector<std::string>{"/bin/prog", "-x"}));
    EXPECT_EQ(env.at("RANK"), std::to_string(local));
    EXPECT_EQ(env.at("LOCAL_RANK"), std::to_string(local));
    EXPECT_EQ(env.at(dpt::launch::kSpawnLocalRankVariable), std::to_string(local));
    EXPECT_EQ(env.at("WORLD_SIZE"), "2");
    EXPECT_EQ(env.at("MASTER_ADDR"), "127.0.0.1");
    EXPECT_EQ(env.at("PATH"), "/bin");
  }
  EXPECT_EQ(specs[0].env.at("MASTER_PORT"), specs[1].env.at("MASTER_PORT"));
  EXPECT_GT(std::stoi(specs[0].env.at("MASTER_PORT")), 0);
}

TEST(Spawn, SeveralNodesShareAGivenMaster) {
  const auto plan = plan_spawn(2, Environment());
  const auto options = SpawnOptions().nnodes(2).node_rank(1).master_addr("10.0.0.7").master_port(23456);
  const auto specs = dpt::launch::make_spawn_specs(plan, options, {"/bin/prog"}, Environment());
  EXPECT_EQ(specs[1].env.at("RANK"), "3");
  EXPECT_EQ(specs[1].env.at("LOCAL_RANK"), "1");
  EXPECT_EQ(specs[1].env.at("WORLD_SIZE"), "4");
  EXPECT_EQ(specs[1].env.at("MASTER_ADDR"), "10.0.0.7");
  EXPECT_EQ(specs[1].env.at("MASTER_PORT"), "23456");
  try {
    dpt::launch::make_spawn_specs(plan, SpawnOptions().nnodes(2), {"/bin/prog"}, Environment());
    FAIL() << "a ConfigError was expected";
  } catch (const dpt::ConfigError& e) {
    EXPECT_STREQ(e.what(), "spawn: with 2 nodes, give the master port (every node must use the same one)");
  }
}
