#pragma once
// The training step bench-ddp and bench-dp time, set the same way, so that bench/data_parallel
// compares their figures at one model, batch and image size.

#include <CLI/CLI.hpp>

#include <cstdint>
#include <string>

namespace dpt::cli {

struct BenchStepFlags {
  std::string arch = "resnet18";
  int64_t batch_size = 32;  // images per rank or replica
  int64_t image_size = 64;  // side of the random images
  int64_t steps = 20;       // measured
  int64_t warmup = 3;       // run before measuring
  int threads = 1;          // intra-op threads per rank or replica
};

// `each` names what a batch and the threads belong to in --help ("rank", "replica").
void add_bench_step_flags(CLI::App& app, BenchStepFlags& flags, const std::string& each);

}  // namespace dpt::cli
