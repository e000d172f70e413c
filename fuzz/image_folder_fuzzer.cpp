// libFuzzer target: ImageFolder's scan of a folder tree someone else made: odd names (bytes that
// are not UTF-8, newlines, leading dots and dashes, upper-case extensions), empty class folders,
// files where folders are expected, symbolic links to files, to folders (followed, as torchvision
// follows them) and to nothing. A DataError is the expected answer to a tree that is not a dataset;
// any other exception, a crash, a sanitizer report or a hang over 1 s is a bug.
//
// The input builds the tree, entry by entry: a kind byte (folder, file, link to an earlier entry,
// link to nowhere), a byte choosing the folder it goes in (or the link's target), then its name up
// to the next NUL byte. The scan must list every image file once, each under its class, in order.
//
//   scripts/fuzz image_folder 60

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include "dptrain/common/error.h"
#include "dptrain/data/image_folder.h"
#include "scratch_dir.h"

namespace fs = std::filesystem;

namespace {

constexpr size_t kMaxEntries = 48;
constexpr size_t kMaxName = 40;

// A file name from fuzz bytes: no '/' (a path separator) and not "." or "..".
std::string entry_name(std::string bytes) {
  std::replace(bytes.begin(), bytes.end(), '/', '_');
  if (bytes.size() > kMaxName) bytes.resize(kMaxName);
  if (bytes.empty() || bytes == "." || bytes == "..") bytes = "e" + bytes;
  return bytes;
}

void check(bool condition) {
  if (!condition) std::abort();
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  static const ScratchDir scratch("image-folder");
  const fs::path root = scratch.fresh() / "root";
  fs::create_directories(root);

  std::vector<fs::path> folders = {root}, entries;
  size_t at = 0;
  while (at + 2 <= size && entries.size() < kMaxEntries) {
    const int kind = data[at] % 4;
    const size_t choice = data[at + 1];
    at += 2;
    size_t end = at;
    while (end < size && data[end] != 0) ++end;
    const std::string name = entry_name(std::string(reinterpret_cast<const char*>(data + at), end - at));
    at = end + 1;
    const fs::path path = folders[choice % folders.size()] / name;
    std::error_code error;  // a name taken already: the entry is not made
    if (kind == 0 && fs::create_directory(path, error)) {
      folders.push_back(path);
    } else if (kind == 1 && !fs::exists(path, error)) {
      std::ofstream(path) << "not an image";
    } else if (kind == 2 && !entries.empty()) {
      fs::create_symlink(entries[choice % entries.size()], path, error);
    } else if (kind == 3) {
      fs::create_symlink(root.parent_path() / "nowhere", path, error);
    }
    if (fs::symlink_status(path, error).type() != fs::file_type::not_found) entries.push_back(path);
  }

  try {
    const dpt::data::ImageFolder folder(root.string(), dpt::data::Transform(dpt::data::TransformOptions().size(8)),
                                        dpt::data::BadImagePolicy::Skip);
    const auto& classes = folder.classes();
    check(!classes.empty() && std::is_sorted(classes.begin(), classes.end()));
    for (int64_t i = 0; i < folder.size(); ++i) {
      const int64_t label = folder.label(i);
      check(label >= 0 && label < folder.num_classes());
      const std::string prefix = (root / classes[label]).string() + "/";
      check(folder.path(i).compare(0, prefix.size(), prefix) == 0);
      check(i == 0 || folder.label(i - 1) <= label);
    }
  } catch (const dpt::DataError&) {
  }
  return 0;
}
