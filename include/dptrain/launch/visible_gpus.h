#pragma once
// The GPUs a process started with `env` can use, found without loading CUDA (the launcher stays
// light): the entries of CUDA_VISIBLE_DEVICES when set, else one per /dev/nvidiaN device file.
//
//   auto gpus = dpt::launch::visible_gpus(env);   // CUDA_VISIBLE_DEVICES=1,3 -> {"1", "3"}
//   // such a process calls gpus[i] cuda:i: the index into this list, never the id in it

#include <string>
#include <vector>

#include "dptrain/common/environment.h"

namespace dpt::launch {

// Each visible GPU's id as CUDA_VISIBLE_DEVICES names it (an index, a UUID or a MIG name), in the
// order the process numbers them; "0".."N-1" when the variable is unset; empty when it is empty.
std::vector<std::string> visible_gpus(const Environment& env);

}  // namespace dpt::launch
