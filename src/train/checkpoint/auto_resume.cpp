#include "dptrain/train/checkpoint/auto_resume.h"

#include "dptrain/common/error.h"
#include "dptrain/train/checkpoint/checkpoint_file.h"

namespace dpt::train {

namespace fs = std::filesystem;

FoundCheckpoint find_resume_checkpoint(const fs::path& dir) {
  FoundCheckpoint found;
  if (!fs::is_directory(dir)) return found;
  std::vector<fs::path> candidates;
  if (fs::exists(dir / kLatestCheckpointName)) candidates.push_back(dir / kLatestCheckpointName);
  const auto epochs = epoch_checkpoints(dir);
  candidates.insert(candidates.end(), epochs.rbegin(), epochs.rend());
  for (const auto& file : candidates) {
    try {
      found.checkpoint = TrainingCheckpoint::from_ivalue(load_checkpoint(file), file);
      found.file = file;
      return found;
    } catch (const CheckpointError& error) {
      found.passed_over.push_back(error.what());  // names the file
    }
  }
  if (candidates.empty()) return found;
  std::string reasons;
  for (const auto& line : found.passed_over) reasons += "\n  " + line;
  throw CheckpointError(str("--resume auto: no checkpoint in ", dir.string(), " reads back whole:", reasons,
                            "\nmove the folder aside to start over, or resume one of its files by name"));
}

}  // namespace dpt::train
