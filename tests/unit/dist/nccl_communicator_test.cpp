// The Communicator over NCCL, as `dptrain train --gpu` gets it from init_process_group: one rank
// per visible GPU (two at most), as threads of this process on a file rendezvous. One GPU still
// runs every collective's NCCL path (the barrier's integer read back, bfloat16, the mean); two also
// check the sums across ranks.

#include <gtest/gtest.h>

#include <torch/cuda.h>
#include <torch/torch.h>

#include <functional>
#include <string>

#include "dptrain/common/environment.h"
#include "dptrain/dist/init.h"
#include "support/temp_dir.h"
#include "support/thread_ranks.h"

#if defined(DPTRAIN_WITH_NCCL)

namespace {

using dpt::dist::Communicator;
using dpt::dist::ReduceOp;

// Runs `body` on ranks 0 .. world_size-1, each a thread with its own GPU.
void run_nccl_ranks(int world_size, const std::function<void(Communicator&)>& body) {
  dpt::testing::TempDir dir;
  dpt::testing::run_rank_threads(world_size, [&](int rank) {
    const std::string r = std::to_string(rank), n = std::to_string(world_size);
    const dpt::Environment env({{"RANK", r}, {"LOCAL_RANK", r}, {"WORLD_SIZE", n}, {"LOCAL_WORLD_SIZE", n}});
    const auto comm = dpt::dist::init_process_group(dpt::dist::InitOptions()
                                                        .backend("nccl")
                                                        .init_method("file://" + dir.path() + "/rendezvous")
                                                        .timeout(std::chrono::seconds(60)),
                                                    env);
    body(*comm);
  });
}

TEST(NcclCommunicator, EveryCollectiveOnTheVisibleGpusGivesTheSumOverRanks_CUDA) {
  if (!torch::cuda::is_available()) GTEST_SKIP() << "no CUDA device";
  // One rank alone passes every collective by doing nothing: a world of one proves none of them.
  if (torch::cuda::device_count() < 2) {
    GTEST_SKIP() << "one visible GPU: NCCL's collectives need two ranks on two GPUs to be proven, so none was";
  }
  const int n = 2;
  const double rank_sum = n * (n + 1) / 2.0;  // rank r contributes r + 1
  run_nccl_ranks(n, [&](Communicator& comm) {
    const int r = comm.rank();
    const at::Device gpu(at::kCUDA, static_cast<c10::DeviceIndex>(r));
    EXPECT_EQ(comm.backend_name(), "nccl");
    EXPECT_EQ(comm.device(), gpu);
    comm.barrier();
    for (const auto dtype : {at::kFloat, at::kHalf, at::kBFloat16, at::kLong}) {
      at::Tensor t = at::full({5}, r + 1, at::TensorOptions().dtype(dtype).device(gpu));
      comm.all_reduce(t);
      EXPECT_EQ(t.scalar_type(), dtype);
      EXPECT_EQ(t.device(), gpu);
      EXPECT_TRUE(t.cpu().to(at::kDouble).eq(rank_sum).all().item<bool>()) << dtype << ": " << t;
    }
    at::Tensor mean = at::full({3}, r + 1.0, at::TensorOptions().device(gpu));
    comm.all_reduce(mean, ReduceOp::Mean);
    EXPECT_DOUBLE_EQ(mean[0].item<double>(), rank_sum / n);
    at::Tensor from_last = at::full({4}, r, at::TensorOptions().device(gpu));
    comm.broadcast(from_last, n - 1);
    EXPECT_TRUE(from_last.eq(n - 1).all().item<bool>()) << from_last;
    const auto parts = comm.all_gather(at::full({2}, r, at::TensorOptions().device(gpu)));
    ASSERT_EQ(parts.size(), static_cast<size_t>(n));
    for (int p = 0; p < n; ++p) EXPECT_TRUE(parts[p].eq(p).all().item<bool>()) << "part " << p;
    // Row i holds i * (r + 1): this rank's slice of the sum is rows [2r, 2r + 2) times rank_sum.
    const at::Tensor rows = at::arange(2 * n, at::TensorOptions().dtype(at::kFloat).device(gpu)) * (r + 1);
    const at::Tensor slice = comm.reduce_scatter(rows, ReduceOp::Sum);
    EXPECT_TRUE(slice.cpu().equal(at::arange(2 * r, 2 * r + 2, at::kFloat) * rank_sum)) << slice;
    EXPECT_DOUBLE_EQ(comm.reduce_value(r + 1.0, /*average=*/false), rank_sum);
    comm.barrier();
  });
}

}  // namespace

#endif  // DPTRAIN_WITH_NCCL
