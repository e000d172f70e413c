// Headers precompiled once for every dptrain target: torch is most of the build time.
#pragma once
#include <torch/torch.h>
#include <torch/csrc/distributed/c10d/Store.hpp>
#include <torch/csrc/distributed/c10d/ProcessGroup.hpp>
