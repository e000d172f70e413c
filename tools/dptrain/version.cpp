#include "version.h"

#include "dptrain/compat/compat.h"

namespace dpt::cli {

std::string version_line() {
#ifdef DPTRAIN_WITH_CUDA
  const char* cuda = "yes";
#else
  const char* cuda = "no";
#endif
#ifdef DPTRAIN_WITH_NCCL
  const char* nccl = "yes";
#else
  const char* nccl = "no";
#endif
  return std::string("dptrain ") + DPTRAIN_VERSION + " (LibTorch " + compat::torch_version() + ", CUDA: " + cuda +
         ", NCCL: " + nccl + ")";
}

}  // namespace dpt::cli
