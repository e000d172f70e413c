#pragma once
// --resume auto: the newest checkpoint in a run's folder that reads back whole, so that one
// command line serves a job's first start and every restart after a crash or a preemption.
//
//   auto found = dpt::train::find_resume_checkpoint("run1");
//   if (found.checkpoint) { /* continue from found.checkpoint, read from found.file */ }
//   for (const auto& why : found.passed_over) std::cerr << "warning: " << why << "\n";

#include <cstdint>
#include <filesystem>
#include <optional>
#include <string>
#include <vector>

#include "dptrain/train/checkpoint/training_checkpoint.h"

namespace dpt::train {

// What `--resume` names to ask for the search below.
inline constexpr const char* kResumeAuto = "auto";

struct FoundCheckpoint {
  std::optional<TrainingCheckpoint> checkpoint;  // unset: the folder holds no checkpoint yet
  std::filesystem::path file;                    // where `checkpoint` was read from
  // Why each newer file did not read back (each names its file), newest first.
  std::vector<std::string> passed_over;
  // Where this rank's folder lacked it: from which rank it came (newest_among_ranks.h), its size,
  // and how long the bytes took to arrive.
  struct Received {
    int rank = 0;
    int64_t bytes = 0;
    double seconds = 0;
  };
  std::optional<Received> received;
};

// Tries checkpoint.pt, then checkpoint_epoch<N>.pt from the highest N down, and returns the first
// that reads whole. A missing folder or one without checkpoints is a fresh start. Throws
// CheckpointError, naming every file and why, when checkpoints exist but none reads: starting over
// would silently throw the run away.
FoundCheckpoint find_resume_checkpoint(const std::filesystem::path& dir);

}  // namespace dpt::train
