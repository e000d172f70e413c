#include <gtest/gtest.h>
#include <sys/resource.h>

#include <cstdlib>
#include <map>
#include <string>

#include "dptrain/common/host_memory.h"

using dpt::Environment;
using dpt::HostMemoryTuning;
using dpt::keep_freed_host_memory;

namespace {

Environment env(std::map<std::string, std::string> vars) { return Environment(std::move(vars)); }

long minor_faults() {
  rusage usage{};
  getrusage(RUSAGE_SELF, &usage);
  return usage.ru_minflt;
}

// Allocates `bytes`, writes one byte per page, frees it; returns the page faults that took.
long faults_to_use_and_free(size_t bytes) {
  long before = minor_faults();
  auto* block = static_cast<volatile char*>(std::malloc(bytes));
  for (size_t offset = 0; offset < bytes; offset += 4096) block[offset] = 1;
  std::free(const_cast<char*>(block));
  return minor_faults() - before;
}

}  // namespace

#if defined(__GLIBC__)

TEST(HostMemory, MallocSettingsInTheEnvironmentWin) {
  EXPECT_EQ(keep_freed_host_memory(env({{"MALLOC_TRIM_THRESHOLD_", "131072"}})),
            HostMemoryTuning::LeftToEnvironment);
  EXPECT_EQ(keep_freed_host_memory(env({{"MALLOC_ARENA_MAX", "2"}})), HostMemoryTuning::LeftToEnvironment);
  EXPECT_EQ(keep_freed_host_memory(env({{"GLIBC_TUNABLES", "glibc.rtld.nns=2:glibc.malloc.tcache_count=0"}})),
            HostMemoryTuning::LeftToEnvironment);
}

TEST(HostMemory, ABlockFreedIsReusedWithoutFaultingItsPagesAgain) {
  // 64 MiB is above the largest mmap threshold glibc picks by itself (32 MiB): by default each
  // allocation is a fresh mapping whose 16384 pages fault in again.
  constexpr size_t kBytes = size_t{64} << 20;
  constexpr long kPages = kBytes / 4096;
  // Unrelated tunables leave the choice here.
  ASSERT_EQ(keep_freed_host_memory(env({{"GLIBC_TUNABLES", "glibc.rtld.nns=2"}})), HostMemoryTuning::Applied);
  EXPECT_GE(faults_to_use_and_free(kBytes), kPages / 2);  // the first use maps the heap's pages
  for (int step = 0; step < 3; ++step) {
    EXPECT_LT(faults_to_use_and_free(kBytes), kPages / 16) << "step " << step;
  }
}

TEST(HostMemory, SmallerThresholdsKeepLargerBlocksApart) {
  // With a 1 MiB threshold a 64 MiB block gets its own mapping, and each use faults it in again.
  constexpr size_t kBytes = size_t{64} << 20;
  ASSERT_EQ(keep_freed_host_memory(Environment(), dpt::HostMemoryOptions()
                                                      .mmap_threshold_bytes(size_t{1} << 20)
                                                      .trim_threshold_bytes(size_t{2} << 20)),
            HostMemoryTuning::Applied);
  faults_to_use_and_free(kBytes);
  EXPECT_GE(faults_to_use_and_free(kBytes), kBytes / 4096 / 2);
  keep_freed_host_memory(Environment());  // back to the defaults for the tests after this one
}

#endif
