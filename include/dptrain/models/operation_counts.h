#pragma once
// The ATen operations that run while a counter lives, by name and on every thread (a GPU's
// backward runs on its device's autograd thread): `dptrain bench-models --op-counts` sets one
// training step's counts beside the Python profiler's counts of torchvision's step. Step times
// only say that two sides differ; the counts name an operation one side runs and the other does
// not (an extra copy, a cast, an unfused update).
//
//   dpt::models::OperationCounter counter;
//   train_step();
//   std::map<std::string, int64_t> counts = counter.counts();   // {"aten::convolution": 53, ...}
//
// Operations called inside others count too (aten::conv2d, the aten::convolution it calls, the
// casts autocast makes inside it), as the profiler's per-name averages count them. Counters do
// not nest, and only names in ATen's namespace ("aten::") are counted.

#include <ATen/record_function.h>

#include <cstdint>
#include <map>
#include <string>

namespace dpt::models {

class OperationCounter {
 public:
  OperationCounter();
  ~OperationCounter();
  OperationCounter(const OperationCounter&) = delete;
  OperationCounter& operator=(const OperationCounter&) = delete;

  // The counts so far, by operation name.
  std::map<std::string, int64_t> counts() const;

 private:
  at::CallbackHandle handle_;
};

}  // namespace dpt::models
