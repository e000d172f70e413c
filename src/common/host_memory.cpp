#include "dptrain/common/host_memory.h"

#include <climits>

#if defined(__GLIBC__)
#include <malloc.h>
#endif

namespace dpt {
namespace {

// True when the user set any of glibc's malloc knobs through the environment.
bool environment_configures_malloc(const Environment& env) {
  for (const char* name : {"MALLOC_MMAP_THRESHOLD_", "MALLOC_TRIM_THRESHOLD_", "MALLOC_TOP_PAD_",
                           "MALLOC_MMAP_MAX_", "MALLOC_ARENA_MAX"}) {
    if (env.has(name)) return true;
  }
  auto tunables = env.get("GLIBC_TUNABLES");
  return tunables && tunables->find("glibc.malloc.") != std::string::npos;
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
