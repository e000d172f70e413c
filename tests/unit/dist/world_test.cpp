#include <gtest/gtest.h>

#include "dptrain/common/error.h"
#include "dptrain/dist/world.h"

using dpt::Environment;
using dpt::dist::detect_world;
using dpt::dist::WorldOverrides;
using dpt::dist::WorldSource;

namespace {
Environment env(std::map<std::string, std::string> vars) { return Environment(std::move(vars)); }
}  // namespace

TEST(DetectWorld, SingleProcessWhenNothingIsSet) {
  auto w = detect_world(env({}));
  EXPECT_EQ(w.source, WorldSource::Single);
  EXPECT_EQ(w.rank, 0);
  EXPECT_EQ(w.world_size, 1);
  EXPECT_EQ(w.master_addr, "127.0.0.1");
  EXPECT_EQ(w.master_port, 29500);
  EXPECT_FALSE(w.is_distributed());
}

TEST(DetectWorld, TorchrunContract) {
  auto w = detect_world(env({{"RANK", "5"}, {"WORLD_SIZE", "8"}, {"LOCAL_RANK", "1"}, {"LOCAL_WORLD_SIZE", "4"},
                             {"GROUP_RANK", "1"}, {"MASTER_ADDR", "10.1.2.3"}, {"MASTER_PORT", "23456"}}));
  EXPECT_EQ(w.source, WorldSource::Torchrun);
  EXPECT_EQ(w.rank, 5);
  EXPECT_EQ(w.world_size, 8);
  EXPECT_EQ(w.local_rank, 1);
  EXPECT_EQ(w.local_world_size, 4);
  EXPECT_EQ(w.node_rank, 1);
  EXPECT_EQ(w.master_addr, "10.1.2.3");
  EXPECT_EQ(w.master_port, 23456);
}

TEST(DetectWorld, TorchrunsAgentStoreAndRestartRound) {
  std::map<std::string, std::string> vars{{"RANK", "1"},
                                          {"WORLD_SIZE", "2"},
                                          {"MASTER_PORT", "23456"},
                                          {"TORCHELASTIC_USE_AGENT_STORE", "True"},
                                          {"TORCHELASTIC_RESTART_COUNT", "3"}};
  auto w = detect_world(env(vars));
  EXPECT_TRUE(w.agent_hosts("127.0.0.1", 23456));
  EXPECT_FALSE(w.agent_hosts("127.0.0.1", 23457));
  EXPECT_FALSE(w.agent_hosts("10.0.0.1", 23456));
  EXPECT_EQ(w.restart_count, 3);
  EXPECT_NE(w.describe().find("torchrun's agent store"), std::string::npos) << w.describe();
  // A port given on the command line is a store of the job's own; the agent's stays where it is.
  WorldOverrides port;
  port.master_port = 24000;
  auto moved = detect_world(env(vars), port);
  EXPECT_FALSE(moved.agent_hosts(moved.master_addr, moved.master_port));
  EXPECT_TRUE(moved.agent_hosts("127.0.0.1", 23456));
  EXPECT_EQ(moved.describe().find("agent"), std::string::npos) << moved.describe();
  // The agent's own port given again on the command line is still the agent's store.
  port.master_port = 23456;
  auto same = detect_world(env(vars), port);
  EXPECT_TRUE(same.agent_hosts(same.master_addr, same.master_port));
  // PyTorch reads exactly "True"; `dptrain launch` sets "False".
  vars["TORCHELASTIC_USE_AGENT_STORE"] = "False";
  EXPECT_FALSE(detect_world(env(vars)).agent_store);
  vars["TORCHELASTIC_USE_AGENT_STORE"] = "true";
  EXPECT_FALSE(detect_world(env(vars)).agent_store);
  EXPECT_FALSE(detect_world(env({{"RANK", "0"}, {"WORLD_SIZE", "2"}})).agent_store);
}

TEST(DetectWorld, PlainRankAndWorldSizeDefaultTheRest) {
  auto w = detect_world(env({{"RANK", "1"}, {"WORLD_SIZE", "2"}}));
  EXPECT_EQ(w.local_rank, 1);
  EXPECT_EQ(w.local_world_size, 2);
  EXPECT_EQ(w.node_rank, 0);
}

TEST(DetectWorld, Slurm) {
  auto w = detect_world(env({{"SLURM_PROCID", "3"}, {"SLURM_NTASKS", "4"}, {"SLURM_LOCALID", "1"},
                             {"SLURM_NODEID", "1"}, {"SLURM_NTASKS_PER_NODE", "2"},
                             {"SLURM_JOB_NODELIST", "gpu[07-08]"}}));
  EXPECT_EQ(w.source, WorldSource::Slurm);
  EXPECT_EQ(w.rank, 3);
  EXPECT_EQ(w.world_size, 4);
  EXPECT_EQ(w.local_rank, 1);
  EXPECT_EQ(w.local_world_size, 2);
  EXPECT_EQ(w.node_rank, 1);
  EXPECT_EQ(w.master_addr, "gpu07");
}

TEST(DetectWorld, SlurmTasksPerNodeFormAndExplicitMaster) {
  auto w = detect_world(env({{"SLURM_PROCID", "0"}, {"SLURM_NTASKS", "6"}, {"SLURM_TASKS_PER_NODE", "3(x2)"},
                             {"SLURM_JOB_NODELIST", "a,b"}, {"MASTER_ADDR", "login1"}, {"MASTER_PORT", "12000"}}));
  EXPECT_EQ(w.local_world_size, 3);
  EXPECT_EQ(w.master_addr, "login1");
  EXPECT_EQ(w.master_port, 12000);
}

TEST(DetectWorld, SlurmPortFollowsTheJobIdUnlessMasterPortIsSet) {
  auto w = detect_world(env({{"SLURM_PROCID", "1"}, {"SLURM_NTASKS", "2"}, {"SLURM_JOB_ID", "123456"}}));
  EXPECT_EQ(w.master_port, 15000 + 3456);
  w = detect_world(env({{"SLURM_PROCID", "1"}, {"SLURM_NTASKS", "2"}, {"SLURM_JOB_ID", "123456"},
                        {"MASTER_PORT", "12000"}}));
  EXPECT_EQ(w.master_port, 12000);
}

TEST(DetectWorld, OpenMPINodeRankIsTheNodeIndexNotOmpisPerNodeCount) {
  // mpirun -np 2 on one node sets OMPI_COMM_WORLD_NODE_RANK to 0 and 1: both ranks are on node 0.
  auto w = detect_world(env({{"OMPI_COMM_WORLD_RANK", "1"}, {"OMPI_COMM_WORLD_SIZE", "2"},
                             {"OMPI_COMM_WORLD_LOCAL_RANK", "1"}, {"OMPI_COMM_WORLD_LOCAL_SIZE", "2"},
                             {"OMPI_COMM_WORLD_NODE_RANK", "1"}}));
  EXPECT_EQ(w.node_rank, 0);
  EXPECT_EQ(w.local_rank, 1);
  EXPECT_EQ(w.master_addr, "127.0.0.1");
  EXPECT_EQ(w.master_port, dpt::dist::kDefaultMasterPort);
}

TEST(DetectWorld, OpenMPI) {
  auto w = detect_world(env({{"OMPI_COMM_WORLD_RANK", "2"}, {"OMPI_COMM_WORLD_SIZE", "4"},
                             {"OMPI_COMM_WORLD_LOCAL_RANK", "0"}, {"OMPI_COMM_WORLD_LOCAL_SIZE", "2"}}));
  EXPECT_EQ(w.source, WorldSource::OpenMPI);
  EXPECT_EQ(w.rank, 2);
  EXPECT_EQ(w.world_size, 4);
  EXPECT_EQ(w.local_rank, 0);
  EXPECT_EQ(w.local_world_size, 2);
  EXPECT_EQ(w.node_rank, 1);
  EXPECT_EQ(w.master_addr, "127.0.0.1");
}

TEST(DetectWorld, TorchrunWinsOverSlurmAndFlagsWinOverBoth) {
  auto e = env({{"RANK", "1"}, {"WORLD_SIZE", "2"}, {"SLURM_PROCID", "0"}, {"SLURM_NTASKS", "1"}});
  EXPECT_EQ(detect_world(e).source, WorldSource::Torchrun);
  WorldOverrides flags;
  flags.rank = 0;
  flags.master_port = 31000;
  auto w = detect_world(e, flags);
  EXPECT_EQ(w.rank, 0);
  EXPECT_EQ(w.world_size, 2);
  EXPECT_EQ(w.master_port, 31000);
}

TEST(DetectWorld, FlagsAlone) {
  WorldOverrides flags;
  flags.rank = 1;
  flags.world_size = 3;
  auto w = detect_world(env({}), flags);
  EXPECT_EQ(w.source, WorldSource::Flags);
  EXPECT_EQ(w.rank, 1);
  EXPECT_EQ(w.local_rank, 1);
  EXPECT_EQ(w.local_world_size, 3);
}

// The message must name the values and what to change.
void expect_config_error(const Environment& e, const std::string& needle, const WorldOverrides& flags = {}) {
  try {
    detect_world(e, flags);
    FAIL() << "expected a ConfigError mentioning '" << needle << "'";
  } catch (const dpt::ConfigError& error) {
    EXPECT_NE(std::string(error.what()).find(needle), std::string::npos) << error.what();
  }
}

TEST(DetectWorld, RankNotBelowWorldSizeIsNamed) {
  expect_config_error(env({{"RANK", "2"}, {"WORLD_SIZE", "2"}}), "rank 2 is outside the world of 2 processes");
  WorldOverrides flags;
  flags.rank = 4;
  flags.world_size = 4;
  expect_config_error(env({}), "valid ranks: 0..3", flags);
}

TEST(DetectWorld, MalformedNumbersNameTheVariable) {
  expect_config_error(env({{"RANK", "one"}, {"WORLD_SIZE", "2"}}), "RANK='one' is not an integer");
  expect_config_error(env({{"RANK", "0"}, {"WORLD_SIZE", "2"}, {"MASTER_PORT", "80000"}}), "master port 80000");
  expect_config_error(env({{"RANK", "0"}, {"WORLD_SIZE", "0"}}), "world size must be at least 1");
}

TEST(DetectWorld, CountsTooLargeAreNamed) {
  expect_config_error(env({{"SLURM_PROCID", "0"}, {"SLURM_NTASKS", "2"}, {"SLURM_TASKS_PER_NODE", "99999999999(x2)"}}),
                      "Slurm's tasks per node '99999999999(x2)' does not start with a count");
  expect_config_error(env({{"RANK", "0"}, {"WORLD_SIZE", "2"}, {"LOCAL_RANK", "4294967296"}}),
                      "LOCAL_RANK='4294967296' is out of range");
}
