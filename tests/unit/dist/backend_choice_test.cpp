#include "dptrain/dist/backend_choice.h"

#include <gtest/gtest.h>

#include <string>

#include "dptrain/common/error.h"

using dpt::ConfigError;
using dpt::dist::choose_backend;
using dpt::dist::GpuView;

namespace {

// Local rank `local_rank` of `processes` on a node whose processes each see `gpus` GPUs.
GpuView node(int local_rank, int processes, int gpus, bool nccl_built = true, bool own_gpus = false) {
  GpuView view;
  view.rank = 4 + local_rank;
  view.local_rank = local_rank;
  view.local_world_size = processes;
  view.visible_gpus = gpus;
  view.own_gpus = own_gpus;
  view.nccl_built = nccl_built;
  return view;
}

std::string config_error(const std::string& requested, const GpuView& view) {
  try {
    choose_backend(requested, view);
  } catch (const ConfigError& e) {
    return e.what();
  }
  return "no error";
}

}  // namespace

TEST(BackendChoice, AutoTakesNcclWhenEveryProcessHasAGpu) {
  for (int local = 0; local < 2; ++local) {
    const auto choice = choose_backend("auto", node(local, 2, 2));
    EXPECT_EQ(choice.backend, "nccl");
    EXPECT_EQ(choice.device, local);  // cuda:<local rank>: distinct GPUs
    EXPECT_EQ(choice.note, "");
  }
  EXPECT_EQ(choose_backend("auto", node(1, 2, 8)).device, 1);
}

TEST(BackendChoice, AutoTakesGlooAndSaysWhyWhenProcessesWouldShareAGpu) {
  // The README's demo on a one-GPU machine: two processes, one GPU. NCCL would refuse it.
  const auto choice = choose_backend("auto", node(1, 2, 1));
  EXPECT_EQ(choice.backend, "gloo");
  EXPECT_EQ(choice.device, -1);
  EXPECT_EQ(choice.note,
            "dist backend auto: gloo, not nccl: 2 processes on this node and 1 visible GPU(s), and NCCL needs a GPU "
            "per process (--nproc-per-node 1 would use it)");
  EXPECT_EQ(choose_backend("auto", node(2, 3, 2)).backend, "gloo");
}

TEST(BackendChoice, AutoTakesGlooSilentlyWithoutGpusOrNccl) {
  for (const auto& view : {node(0, 2, 0), node(0, 1, 4, /*nccl_built=*/false)}) {
    const auto choice = choose_backend("auto", view);
    EXPECT_EQ(choice.backend, "gloo");
    EXPECT_EQ(choice.note, "");
  }
}

TEST(BackendChoice, GpusTheLauncherGaveEachProcessAreTheirOwn) {
  // dptrain launch --gpus 1,3: each process sees one GPU, a different one, as cuda:0.
  for (int local = 0; local < 2; ++local) {
    const auto choice = choose_backend("auto", node(local, 2, 1, true, /*own_gpus=*/true));
    EXPECT_EQ(choice.backend, "nccl");
    EXPECT_EQ(choice.device, 0);
  }
  EXPECT_EQ(choose_backend("nccl", node(1, 2, 1, true, true)).device, 0);
}

TEST(BackendChoice, NcclWhereItCannotWorkIsAConfigErrorWithTheCounts) {
  EXPECT_EQ(config_error("nccl", node(1, 2, 1)),
            "rank 5: the nccl backend needs a GPU of its own for each of the 2 processes on this node, and 1 are "
            "visible: NCCL cannot put two ranks on one GPU. Start at most 1 per node (--nproc-per-node 1), or use "
            "--dist-backend gloo");
  EXPECT_NE(config_error("nccl", node(0, 1, 0)).find("needs a CUDA device and none is visible"), std::string::npos);
  EXPECT_NE(config_error("nccl", node(0, 1, 1, /*nccl_built=*/false)).find("has no NCCL backend"), std::string::npos);
  EXPECT_EQ(choose_backend("nccl", node(1, 2, 2)).device, 1);
}

TEST(BackendChoice, GlooIsTakenAsAskedAndUnknownNamesAreErrors) {
  EXPECT_EQ(choose_backend("gloo", node(0, 1, 8)).backend, "gloo");
  EXPECT_EQ(config_error("mpi", node(0, 1, 0)), "unknown backend 'mpi'; use gloo, nccl or auto");
}
