#include "dptrain/common/host_memory.h"

#include <algorithm>
#include <climits>
#include <string>
#include <string_view>

#if defined(__GLIBC__)
#include <malloc.h>
#endif

#include "dptrain/common/text.h"

namespace dpt {
namespace {

// True when the user set any of glibc's malloc knobs through the environment. All but one:
// glibc.malloc.hugetlb says which pages back the heap and the mappings (transparent huge pages:
// one fault per 2 MiB instead of per 4 KiB), not when memory goes back to the kernel, and it
// composes with the thresholds set here.
bool environment_configures_malloc(const Environment& env) {
  for (const char* name : {"MALLOC_MMAP_THRESHOLD_", "MALLOC_TRIM_THRESHOLD_", "MALLOC_TOP_PAD_",
                           "MALLOC_MMAP_MAX_", "MALLOC_ARENA_MAX"}) {
    if (env.has(name)) return true;
  }
  const std::string tunables = env.get("GLIBC_TUNABLES").value_or("");
  for (size_t start = 0; start < tunables.size();) {
    const size_t end = std::min(tunables.find(':', start), tunables.size());
    const std::string_view tunable = std::string_view(tunables).substr(start, end - start);
    if (starts_with(tunable, "glibc.malloc.") && !starts_with(tunable, "glibc.malloc.hugetlb=")) return true;
    start = end + 1;
  }
  return false;
}

}  // namespace

HostMemoryTuning keep_freed_host_memory(const Environment& env, const HostMemoryOptions& options) {
#if defined(__GLIBC__)
  if (environment_configures_malloc(env)) return HostMemoryTuning::LeftToEnvironment;
  // mallopt takes an int; larger requests are held to INT_MAX.
  auto as_int = [](size_t bytes) { return static_cast<int>(bytes < INT_MAX ? bytes : INT_MAX); };
  // Setting either threshold fixes both (glibc stops moving them), so both are always set.
  bool applied = mallopt(M_MMAP_THRESHOLD, as_int(options.mmap_threshold_bytes())) == 1 &&
                 mallopt(M_TRIM_THRESHOLD, as_int(options.trim_threshold_bytes())) == 1;
  return applied ? HostMemoryTuning::Applied : HostMemoryTuning::Unsupported;
#else
  (void)env;
  (void)options;
  return HostMemoryTuning::Unsupported;
#endif
}

}  // namespace dpt
