// libFuzzer target: a checkpoint or weights file from outside, read as `--resume` and
// `--pretrained` read one (train/checkpoint/): LibTorch's zip reader and unpickler, then dptrain's
// walk of what they built into a TrainingCheckpoint or a state dict. A CheckpointError is the
// expected answer to bad bytes; any other exception, a crash or a sanitizer report is a bug, ours
// or, below load_checkpoint's catch, LibTorch's (which is not instrumented: its crashes show, its
// silent overreads do not).
//
//   scripts/fuzz checkpoint 60

#include <cstddef>
#include <cstdint>
#include <fstream>
#include <string>

#include "dptrain/common/error.h"
#include "dptrain/train/checkpoint/checkpoint_file.h"
#include "dptrain/train/checkpoint/training_checkpoint.h"
#include "scratch_dir.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  static const ScratchDir scratch("checkpoint");
  const std::string path = (scratch.fresh() / "checkpoint.pt").string();
  std::ofstream(path, std::ios::binary | std::ios::trunc).write(reinterpret_cast<const char*>(data), size);
  try {
    dpt::train::TrainingCheckpoint::from_ivalue(dpt::train::load_checkpoint(path), path);
  } catch (const dpt::CheckpointError&) {
  }
  try {
    dpt::train::read_weights(path);
  } catch (const dpt::CheckpointError&) {
  }
  return 0;
}
