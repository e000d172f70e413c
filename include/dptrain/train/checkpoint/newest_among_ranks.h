#pragma once
// --resume auto where the ranks do not share a disk (each machine its own --output folder): rank 0
// writes the checkpoints on its machine, so after a restart or a re-formation the ranks of another
// machine find an older checkpoint, or none. Before any of them restores, every rank reports the
// global step of the checkpoint it found; the ranks behind receive the newest, byte for byte, from
// the lowest rank that holds it, over the communicator, and keep it in their own folder (the next
// restart finds it there). Every rank then resumes from the same step.
//
//   FoundCheckpoint found = find_resume_checkpoint(dir);        // this rank's own
//   found = newest_among_ranks(*comm, std::move(found), dir);   // collective
//
// A shared folder costs one small all_gather: every rank found the same step.

#include <filesystem>

#include "dptrain/dist/communicator.h"
#include "dptrain/train/checkpoint/auto_resume.h"

namespace dpt::train {

// The newest of the ranks' `found` checkpoints, as this rank now holds it in `dir` (`found` itself
// where it was the newest already); a fresh start where no rank found one. Collective. Throws
// CheckpointError when the copy cannot be written or does not read back, naming the file.
FoundCheckpoint newest_among_ranks(dist::Communicator& comm, FoundCheckpoint found, const std::filesystem::path& dir);

}  // namespace dpt::train
