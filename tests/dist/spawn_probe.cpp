// The program tests/dist/test_spawn.py drives: dpt::launch::spawn with a function that prints what
// its worker sees, then fails, sleeps or returns as asked. No LibTorch: it starts in milliseconds.
//
//   spawn_probe --nprocs 2 [--fail-rank R] [--throw-rank R] [--sleep S]   # --nprocs 0: one per visible GPU

#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <iostream>
#include <stdexcept>
#include <string>
#include <thread>

#include "dptrain/launch/spawn.h"

namespace {

std::string env_or(const char* name, const char* fallback) {
  const char* value = std::getenv(name);
  return value ? value : fallback;
}

}  // namespace

int main(int argc, char** argv) {
  int nprocs = 2, fail_rank = -1, throw_rank = -1;
  double sleep_s = 0;
  for (int i = 1; i + 1 < argc; i += 2) {
    const std::string flag = argv[i];
    if (flag == "--nprocs") nprocs = std::atoi(argv[i + 1]);
    if (flag == "--fail-rank") fail_rank = std::atoi(argv[i + 1]);
    if (flag == "--throw-rank") throw_rank = std::atoi(argv[i + 1]);
    if (flag == "--sleep") sleep_s = std::atof(argv[i + 1]);
  }
  // Runs in the parent and again in every worker: main() starts over there.
  std::printf("main() in pid %d\n", static_cast<int>(getpid()));
  std::fflush(stdout);
  const auto work = [&](int local_rank) {
    std::printf("PID %d local_rank %d RANK %s LOCAL_RANK %s WORLD_SIZE %s MASTER %s:%s CUDA_VISIBLE_DEVICES %s "
                "marker %s args %d\n",
                static_cast<int>(getpid()), local_rank, env_or("RANK", "-").c_str(),
                env_or("LOCAL_RANK", "-").c_str(), env_or("WORLD_SIZE", "-").c_str(),
                env_or("MASTER_ADDR", "-").c_str(), env_or("MASTER_PORT", "-").c_str(),
                env_or("CUDA_VISIBLE_DEVICES", "unset").c_str(),
                env_or(dpt::launch::kSpawnLocalRankVariable, "unset").c_str(), argc);
    std::fflush(stdout);
    if (local_rank == fail_rank) {
      std::this_thread::sleep_for(std::chrono::milliseconds(300));
      std::printf("about to fail: the disk is full\n");
      return 3;
    }
    if (local_rank == throw_rank) throw std::runtime_error("no space left on device");
    std::this_thread::sleep_for(std::chrono::duration<double>(sleep_s));
    return 0;
  };
  int code = 0;
  try {
    code = dpt::launch::spawn(work, nprocs > 0 ? std::optional<int>(nprocs) : std::nullopt,
                              dpt::launch::SpawnOptions().grace_period(std::chrono::seconds(3)));
  } catch (const std::exception& e) {
    std::cerr << "spawn_probe: error: " << e.what() << std::endl;
    return 2;
  }
  std::printf("spawn returned %d in pid %d\n", code, static_cast<int>(getpid()));
  return code;
}
