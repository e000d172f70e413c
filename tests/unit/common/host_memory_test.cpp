#include <gtest/gtest.h>
#include <sys/resource.h>

#include <cstdio>
#include <cstdlib>
#include <functional>
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
  // Huge pages beside a threshold: the threshold is the user's.
  EXPECT_EQ(keep_freed_host_memory(env({{"GLIBC_TUNABLES", "glibc.malloc.hugetlb=1:glibc.malloc.mmap_threshold=4096"}})),
            HostMemoryTuning::LeftToEnvironment);
}

namespace {

// Runs `check` in a process of its own: a threadsafe death test re-executes this binary for this
// test alone, so glibc's heap holds nothing that earlier tests freed (their free blocks would serve
// the allocations below without a fault, whatever the settings). `check` returns what went wrong,
// or nothing.
void in_fresh_process(const std::function<std::string()>& check) {
  GTEST_FLAG_SET(death_test_style, "threadsafe");
  EXPECT_EXIT(
      {
        const std::string failure = check();
        std::fputs(failure.c_str(), stderr);
        std::_Exit(failure.empty() ? 0 : 1);
      },
      ::testing::ExitedWithCode(0), "^$");
}

std::string expect_faults(const std::string& what, long faults, long low, long high) {
  if (faults >= low && faults < high) return "";
  return what + ": " + std::to_string(faults) + " page faults, expected [" + std::to_string(low) + ", " +
         std::to_string(high) + ")\n";
}

}  // namespace

#if defined(__SANITIZE_ADDRESS__)

// AddressSanitizer's allocator stands in for glibc's malloc (scripts/sanitize), and its mallopt
// refuses every setting: the tuning must say so rather than claim it applied.
TEST(HostMemory, UnderAddressSanitizerTheTuningSaysItWasNotApplied) {
  EXPECT_EQ(keep_freed_host_memory(Environment()), HostMemoryTuning::Unsupported);
}

#else

TEST(HostMemory, ABlockFreedIsReusedWithoutFaultingItsPagesAgain) {
  in_fresh_process([] {
    // 64 MiB is above the largest mmap threshold glibc picks by itself (32 MiB): by default each
    // allocation is a fresh mapping whose 16384 pages fault in again.
    constexpr size_t kBytes = size_t{64} << 20;
    constexpr long kPages = kBytes / 4096;
    // Unrelated tunables leave the choice here.
    if (keep_freed_host_memory(env({{"GLIBC_TUNABLES", "glibc.rtld.nns=2"}})) != HostMemoryTuning::Applied) {
      return std::string("the tuning was not applied\n");
    }
    // The first use maps the heap's pages.
    std::string failures = expect_faults("first use", faults_to_use_and_free(kBytes), kPages / 2, kPages * 2);
    for (int step = 0; step < 3; ++step) {
      failures += expect_faults("use " + std::to_string(step + 2), faults_to_use_and_free(kBytes), 0, kPages / 16);
    }
    return failures;
  });
}

// Which pages back the memory is not when it goes back: asking for transparent huge pages still
// gets the thresholds.
TEST(HostMemory, HugePagesInTheEnvironmentStillGetTheThresholds) {
  in_fresh_process([] {
    const auto tuning = keep_freed_host_memory(env({{"GLIBC_TUNABLES", "glibc.rtld.nns=2:glibc.malloc.hugetlb=1"}}));
    return tuning == HostMemoryTuning::Applied ? std::string() : std::string("the tuning was not applied\n");
  });
}

#endif  // __SANITIZE_ADDRESS__

TEST(HostMemory, SmallerThresholdsKeepLargerBlocksApart) {
  in_fresh_process([] {
    // With a 1 MiB threshold a 64 MiB block gets its own mapping, and each use faults it in again.
    constexpr size_t kBytes = size_t{64} << 20;
    constexpr long kPages = kBytes / 4096;
    keep_freed_host_memory(Environment(), dpt::HostMemoryOptions()
                                              .mmap_threshold_bytes(size_t{1} << 20)
                                              .trim_threshold_bytes(size_t{2} << 20));
    faults_to_use_and_free(kBytes);
    return expect_faults("second use", faults_to_use_and_free(kBytes), kPages / 2, kPages * 2);
  });
}

#endif
