#pragma once
// Files of saved state that are always complete: written beside the target, flushed to disk and
// renamed over it, so a crash at any moment leaves either the old file or the new one, and the
// rename itself survives a power cut. Checkpoints and state dicts are written so.
//
//   dpt::write_file_atomically("model.pt", [&](const dpt::ByteWriter& write) { write(bytes, size); });
//   dpt::link_or_copy_file_atomically("checkpoint.pt", "model_best.pt");
//   for (const auto& leftover : dpt::remove_unfinished_writes(dir)) log(leftover);

#include <cstddef>
#include <cstdint>
#include <filesystem>
#include <functional>
#include <vector>

namespace dpt {

// Takes the next bytes of a file, in order.
using ByteWriter = std::function<void(const char* bytes, size_t size)>;
// Writes a file's bytes, in order, into the writer it is given (compat::pickle_save streams so).
using FileContents = std::function<void(const ByteWriter& write)>;

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

// Deletes the temporary files `<name>.tmp.<pid>` in `dir` whose process no longer runs: what
// write_file_atomically leaves when its process is killed before the rename (the file it was
// replacing is intact). Saved state is as large as the model, so they are worth removing.
// Returns what was deleted; a file that cannot be deleted is left.
std::vector<std::filesystem::path> remove_unfinished_writes(const std::filesystem::path& dir);

}  // namespace dpt
