// PyTorch's own flight recorder off for the whole test process, before any process group exists.
//
// The unit tests run several ranks as threads of one process (thread_ranks.h), each with its own
// Gloo process group, and they all start their first collectives at once. PyTorch's recorder is one
// object per process, and the releases that record Gloo's collectives into it (2.11 among them)
// touch its map of groups before taking its lock (pytorch/pytorch#179313 and #179449, April 2026):
// with four thread ranks the suite crashed on PyTorch 2.11, a SIGSEGV in
// std::_Rb_tree_insert_and_rebalance under FlightRecorder::recordWithResetEnabled, called from
// ProcessGroupGloo::enqueue. dptrain's programs start their groups' collectives from one thread
// (a --mode ps worker's two groups one after the other), so they do not meet it, and no test reads
// PyTorch's records (dptrain keeps its own). The recorder reads these variables once, when it is
// first used: hence a static initializer, before any test, rather than a fixture.

#include <cstdlib>

namespace {

const bool torch_flight_recorder_off = [] {
  ::setenv("TORCH_FR_BUFFER_SIZE", "0", /*overwrite=*/1);
  ::setenv("TORCH_NCCL_TRACE_BUFFER_SIZE", "0", /*overwrite=*/1);  // its older name
  return true;
}();

}  // namespace
