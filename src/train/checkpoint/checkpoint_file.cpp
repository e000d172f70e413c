#include "dptrain/train/checkpoint/checkpoint_file.h"

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <regex>
#include <string>

#include <torch/serialize.h>

#include "dptrain/common/error.h"
#include "dptrain/common/read_file.h"
#include "dptrain/common/text.h"
#include "dptrain/compat/pickle.h"

namespace dpt::train {
namespace fs = std::filesystem;
namespace {

std::vector<char> read_all(const fs::path& path) {
  auto bytes = read_file<std::vector<char>>(path);
  DPT_CHECK(bytes, CheckpointError, "cannot open checkpoint ", path.string(), ": ", std::strerror(errno),
            "; check the path (--resume) and its permissions");
  return std::move(*bytes);
}

std::string first_line(const std::string& text) { return text.substr(0, text.find('\n')); }

}  // namespace

int64_t save_checkpoint(const c10::IValue& state, const fs::path& path) {
  return write_file_atomically(path, [&](const compat::ByteSink& write) { compat::pickle_save(state, write); });
}

void check_checkpoint_file(const fs::path& path, const std::string& what, const std::string& flag) {
  if (fs::is_regular_file(path)) return;
  DPT_CHECK(fs::is_directory(path), CheckpointError, what, " ", path.string(),
            " does not exist; check the path given to ", flag);
  std::vector<std::string> files;
  std::error_code error;
  for (const auto& entry : fs::directory_iterator(path, error)) {
    if (entry.is_regular_file() && entry.path().extension() == ".pt") files.push_back(entry.path().filename().string());
  }
  std::sort(files.begin(), files.end());
  if (files.empty()) {
    throw CheckpointError(str(what, " ", path.string(), " is a folder holding no .pt file; give ", flag, " a file"));
  }
  throw CheckpointError(str(what, " ", path.string(), " is a folder; give ", flag, " one of its files: ",
                            join(files, ", ")));
}

c10::IValue load_checkpoint(const fs::path& path) {
  DPT_CHECK(fs::exists(path), CheckpointError, "checkpoint ", path.string(),
            " does not exist; check the path given to resume from");
  const std::vector<char> bytes = read_all(path);
  try {
    return compat::pickle_load(bytes);
  } catch (const std::exception& e) {
    throw CheckpointError(str(
        "checkpoint ", path.string(), " (", bytes.size(), " bytes) is truncated or corrupt: ",
        first_line(e.what()),
        "; it was not written by dptrain or torch.save, or was damaged after writing: an older "
        "checkpoint_epoch<N>.pt in its folder may be whole"));
  }
}

fs::path epoch_checkpoint_path(const fs::path& dir, int64_t epoch) {
  return dir / ("checkpoint_epoch" + std::to_string(epoch) + ".pt");
}

std::vector<fs::path> epoch_checkpoints(const fs::path& dir) {
  static const std::regex kEpochFile(R"(checkpoint_epoch(\d+)\.pt)");
  std::vector<std::pair<int64_t, fs::path>> found;
  for (const auto& entry : fs::directory_iterator(dir)) {
    const std::string name = entry.path().filename().string();
    std::smatch match;
    if (entry.is_regular_file() && std::regex_match(name, match, kEpochFile)) {
      found.emplace_back(std::stoll(match[1].str()), entry.path());
    }
  }
  std::sort(found.begin(), found.end());
  std::vector<fs::path> files;
  for (auto& [epoch, file] : found) files.push_back(std::move(file));
  return files;
}

std::vector<fs::path> rotate_checkpoints(const fs::path& dir, int64_t keep_last) {
  DPT_CHECK(keep_last >= 1, ConfigError, "the number of checkpoints to keep must be at least 1, got ",
            keep_last);
  const auto found = epoch_checkpoints(dir);
  std::vector<fs::path> deleted;
  for (size_t i = 0; i + keep_last < found.size(); ++i) {
    std::error_code error;
    fs::remove(found[i], error);
    DPT_CHECK(!error, CheckpointError, "cannot delete old checkpoint ", found[i].string(), ": ", error.message(),
              "; check the folder's permissions");
    deleted.push_back(found[i]);
  }
  return deleted;
}

}  // namespace dpt::train
