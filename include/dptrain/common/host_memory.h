#pragma once
// Keeps the CPU memory that training frees for the next step, instead of handing it back to the
// kernel.
//
// A training step allocates and frees the same large CPU tensors (activations, gradients, im2col
// buffers) every time. glibc's malloc serves blocks above its mmap threshold (128 KiB at first,
// moving up to 32 MiB) with fresh mappings and gives a free heap top back once it passes the trim
// threshold, so every step faults its memory in again and the kernel zeroes each page first
// (`dptrain bench-ddp`, ResNet-18, 64x64, batch 32, 18 steps: 235k page faults and 0.70 s of
// kernel time; 83k and 0.30 s with the thresholds raised). Raised, they keep the freed blocks in
// the heap, where the next step finds them; the process holds on to its peak, as tcmalloc and
// jemalloc (PyTorch's advice for CPU training) do.
//
//   dpt::keep_freed_host_memory(dpt::Environment::current());   // first thing in main()

#include <cstddef>

#include <torch/arg.h>

#include "dptrain/common/environment.h"

namespace dpt {

struct HostMemoryOptions {
  // Blocks up to this size come from the heap rather than from their own mapping.
  TORCH_ARG(size_t, mmap_threshold_bytes) = size_t{256} << 20;
  // Free memory at the heap's top is given back to the kernel only beyond this much.
  TORCH_ARG(size_t, trim_threshold_bytes) = size_t{512} << 20;
};

enum class HostMemoryTuning {
  Applied,
  // The environment configures glibc's malloc (MALLOC_*_ or GLIBC_TUNABLES=glibc.malloc.*, but
  // for glibc.malloc.hugetlb, which composes with the thresholds): the user's choice stands.
  LeftToEnvironment,
  // Not glibc: its allocator decides.
  Unsupported,
};

// Sets the two thresholds for this process unless `env` already configures malloc; says which.
HostMemoryTuning keep_freed_host_memory(const Environment& env, const HostMemoryOptions& options = {});

}  // namespace dpt
