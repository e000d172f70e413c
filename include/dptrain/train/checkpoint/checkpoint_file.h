#pragma once
// Checkpoint files that are always complete: written beside the target, flushed to disk and
// renamed over it, so a crash at any moment leaves either the old file or the new one.
//
//   namespace fs = std::filesystem;
//   const fs::path file = dpt::train::epoch_checkpoint_path(dir, epoch);   // checkpoint_epoch7.pt
//   dpt::train::save_checkpoint(state, file);                              // state: e.g. a GenericDict
//   if (is_best) dpt::train::link_or_copy_file_atomically(file, dir / dpt::train::kBestCheckpointName);
//   dpt::train::rotate_checkpoints(dir, /*keep_last=*/3);
//   c10::IValue state = dpt::train::load_checkpoint(file);                 // CheckpointError if bad

#include <cstdint>
#include <filesystem>
#include <functional>
#include <vector>

#include <ATen/core/ivalue.h>

#include "dptrain/compat/pickle.h"

namespace dpt::train {

inline constexpr const char* kBestCheckpointName = "model_best.pt";
// The newest checkpoint of a run, rewritten at every save.
inline constexpr const char* kLatestCheckpointName = "checkpoint.pt";

// Writes a file's bytes, in order, into the sink it is given (compat::pickle_save streams so).
using FileContents = std::function<void(const compat::ByteSink& write)>;

// Replaces `path` with what `contents` writes: writes `<path>.tmp.<pid>` in the same folder as it
// comes, fsyncs it, renames it over `path` and fsyncs the folder. Returns the file's size. Throws
// CheckpointError naming the file, the failing operation and the system's reason (an exception of
// `contents` passes through); the old file, if any, is then untouched and the temporary file
// removed.
int64_t write_file_atomically(const std::filesystem::path& path, const FileContents& contents);

// Copies `from` to `to` with the same guarantee for `to` (e.g. to model_best.pt), a few MB at a time.
void copy_file_atomically(const std::filesystem::path& from, const std::filesystem::path& to);

// Gives `to` the contents of `from` with the same guarantee, as a second name of the same file (a
// hard link) where the file system allows it: no bytes written, no disk space taken twice (a run's
// checkpoint.pt, checkpoint_epoch<N>.pt and model_best.pt are often one file). Only for a `from`
// that is replaced, never changed in place, as every file write_file_atomically writes: replacing
// `from` later leaves `to` as it was. Where links are refused (FAT, some network shares, too many
// links) it copies.
void link_or_copy_file_atomically(const std::filesystem::path& from, const std::filesystem::path& to);

// Pickles `state` (the format torch.load reads) into the file as it goes, atomically. Returns the
// file's size.
int64_t save_checkpoint(const c10::IValue& state, const std::filesystem::path& path);

// Reads what save_checkpoint wrote. A missing, truncated or corrupt file throws CheckpointError
// naming the file and what to do.
c10::IValue load_checkpoint(const std::filesystem::path& path);

// <dir>/checkpoint_epoch<epoch>.pt
std::filesystem::path epoch_checkpoint_path(const std::filesystem::path& dir, int64_t epoch);

// The checkpoint_epoch<N>.pt files in `dir`, lowest N first.
std::vector<std::filesystem::path> epoch_checkpoints(const std::filesystem::path& dir);

// Deletes the temporary files `<name>.tmp.<pid>` in `dir` whose process no longer runs: what
// write_file_atomically leaves when its process is killed before the rename (the file it was
// replacing is intact). A checkpoint is as large as the model's state, so they are worth removing.
// Returns what was deleted; a file that cannot be deleted is left.
std::vector<std::filesystem::path> remove_unfinished_writes(const std::filesystem::path& dir);

// Deletes checkpoint_epoch<N>.pt files in `dir` beyond the `keep_last` with the highest N, lowest
// N first. Other files (model_best.pt included) are never touched. Returns what was deleted.
// Throws ConfigError when keep_last < 1, CheckpointError when a file cannot be deleted.
std::vector<std::filesystem::path> rotate_checkpoints(const std::filesystem::path& dir,
                                                      int64_t keep_last);

}  // namespace dpt::train
