#pragma once
// What `dptrain --version` prints, and the manual page's header.

#include <string>

namespace dpt::cli {

// "dptrain 0.1.0 (LibTorch 2.6.0, CUDA: yes, NCCL: yes)": dptrain's version (CMakeLists.txt's
// project(), the one place it is written), the LibTorch it was built with, and whether CUDA and
// NCCL are in that build.
std::string version_line();

}  // namespace dpt::cli
