// The program tests/dist/test_dist_errors.py drives to make the classic hangs happen on purpose:
// every rank all-reduces a small tensor once per step, and rank R at step K does one thing wrong.
//
//   dptrain launch --standalone --nproc-per-node 2 -- dptrain_collective_probe
//       --fault skip|shape|stop|kill [--rank 1] [--at 5] [--steps 12] [--timeout 3]
//
//   skip   rank R skips step K's all_reduce (the others' step K meets its step K + 1)
//   shape  rank R all-reduces one element more at step K
//   stop   rank R stops itself (SIGSTOP) before step K: alive, silent
//   kill   rank R dies (SIGKILL) before step K, between collectives

#include <signal.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <string>

#include "dptrain/dist/init.h"

int main(int argc, char** argv) {
  int steps = 12, fault_rank = 1, at = 5;
  double timeout_s = 3;
  std::string fault = "none";
  for (int i = 1; i + 1 < argc; i += 2) {
    const std::string flag = argv[i];
    if (flag == "--steps") steps = std::atoi(argv[i + 1]);
    if (flag == "--rank") fault_rank = std::atoi(argv[i + 1]);
    if (flag == "--at") at = std::atoi(argv[i + 1]);
    if (flag == "--fault") fault = argv[i + 1];
    if (flag == "--timeout") timeout_s = std::atof(argv[i + 1]);
  }
  try {
    const auto timeout = std::chrono::milliseconds(static_cast<int64_t>(timeout_s * 1000));
    auto comm = dpt::dist::init_process_group(dpt::dist::InitOptions().timeout(timeout));
    for (int step = 0; step < steps; ++step) {
      comm->flight_recorder().set_step(step);
      const bool wrong_here = comm->rank() == fault_rank && step == at;
      if (wrong_here && fault == "stop") raise(SIGSTOP);
      if (wrong_here && fault == "kill") raise(SIGKILL);
      if (wrong_here && fault == "skip") continue;
      at::Tensor values = at::ones({wrong_here && fault == "shape" ? 65 : 64});
      comm->all_reduce(values);
    }
    comm->barrier();
    std::printf("rank %d: %d steps done\n", comm->rank(), steps);
    return 0;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "error: %s\n", e.what());
    return 1;
  }
}
