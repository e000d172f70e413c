#pragma once
// Checkpoint files: saved atomically (common/atomic_file.h), read back with a clear error when
// damaged, named by epoch and rotated.
//
//   namespace fs = std::filesystem;
//   const fs::path file = dpt::train::epoch_checkpoint_path(dir, epoch);   // checkpoint_epoch7.pt
//   dpt::train::save_checkpoint(state, file);                              // state: e.g. a GenericDict
//   if (is_best) dpt::link_or_copy_file_atomically(file, dir / dpt::train::kBestCheckpointName);
//   dpt::train::rotate_checkpoints(dir, /*keep_last=*/3);
//   c10::IValue state = dpt::train::load_checkpoint(file);                 // CheckpointError if bad

#include <cstdint>
#include <filesystem>
#include <string>
#include <vector>

#include <ATen/core/ivalue.h>

#include "dptrain/common/atomic_file.h"

namespace dpt::train {

inline constexpr const char* kBestCheckpointName = "model_best.pt";
// The newest checkpoint of a run, rewritten at every save.
inline constexpr const char* kLatestCheckpointName = "checkpoint.pt";

// Pickles `state` (the format torch.load reads) into the file as it goes, atomically. Returns the
// file's size.
int64_t save_checkpoint(const c10::IValue& state, const std::filesystem::path& path);

// CheckpointError unless `path` names a file, saying what it is instead: missing, or a folder
// (a run's --output folder, the usual slip) with the .pt files it holds. `what` ("checkpoint",
// "weights file") and `flag` ("--resume") are how the message names the path.
void check_checkpoint_file(const std::filesystem::path& path, const std::string& what, const std::string& flag);

// Reads what save_checkpoint wrote. A missing, truncated or corrupt file throws CheckpointError
// naming the file and what to do.
c10::IValue load_checkpoint(const std::filesystem::path& path);

// <dir>/checkpoint_epoch<epoch>.pt
std::filesystem::path epoch_checkpoint_path(const std::filesystem::path& dir, int64_t epoch);

// The checkpoint_epoch<N>.pt files in `dir`, lowest N first.
std::vector<std::filesystem::path> epoch_checkpoints(const std::filesystem::path& dir);

// Deletes checkpoint_epoch<N>.pt files in `dir` beyond the `keep_last` with the highest N, lowest
// N first. Other files (model_best.pt included) are never touched. Returns what was deleted.
// Throws ConfigError when keep_last < 1, CheckpointError when a file cannot be deleted.
std::vector<std::filesystem::path> rotate_checkpoints(const std::filesystem::path& dir,
                                                      int64_t keep_last);

}  // namespace dpt::train
