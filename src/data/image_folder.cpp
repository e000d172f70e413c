#include "dptrain/data/image_folder.h"

#include <sys/stat.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <filesystem>
#include <string>
#include <vector>

#include "dptrain/common/error.h"
#include "dptrain/common/text.h"

namespace fs = std::filesystem;

namespace dpt::data {

namespace {

// torchvision.datasets.folder.IMG_EXTENSIONS
const std::vector<std::string>& image_extensions() {
  static const std::vector<std::string> kExtensions = {".jpg", ".jpeg", ".png",  ".ppm", ".bmp",
                                                       ".pgm", ".tif",  ".tiff", ".webp"};
  return kExtensions;
}

bool has_image_extension(const std::string& name) {
  const std::string lower = ascii_lower(name);
  for (const std::string& e : image_extensions()) {
    if (lower.size() >= e.size() && lower.compare(lower.size() - e.size(), e.size(), e) == 0) return true;
  }
  return false;
}

// A folder's identity, whatever path reaches it.
std::pair<dev_t, ino_t> folder_id(const fs::path& path) {
  struct stat status {};
  DPT_CHECK(::stat(path.c_str(), &status) == 0, DataError, "cannot read ", path.string(), ": ", std::strerror(errno));
  return {status.st_dev, status.st_ino};
}

// What list_images found under one class folder.
struct ImageListing {
  std::vector<std::string> paths;
  int64_t hidden = 0;        // hidden image files and folders left out
  std::string first_hidden;  // the first of them by path, for the warning
};

// Image files under dir in the order of Python's sorted(os.walk(dir)) then sorted(files): by
// directory path, then by name within a directory (byte order, as Python compares str). Links to
// folders are followed, as torchvision follows them; a link back to a folder it is in would be
// followed forever (os.walk does), so it is an error that names it. Hidden entries are left out:
// macOS's ._ files (metadata beside every image copied off its disks) and Jupyter's checkpoint
// folders are no images of the class, and torchvision lists them, then fails to open the ._ files.
ImageListing list_images(const fs::path& dir) {
  ImageListing listing;
  std::vector<std::pair<std::string, std::string>> found;  // (directory, file name)
  std::error_code ec;
  fs::recursive_directory_iterator it(dir, fs::directory_options::follow_directory_symlink, ec), end;
  DPT_CHECK(!ec, DataError, "cannot list ", dir.string(), ": ", ec.message());
  // The folders from `dir` down to the one being listed.
  std::vector<std::pair<dev_t, ino_t>> open_folders = {folder_id(dir)};
  for (; it != end; it.increment(ec)) {
    DPT_CHECK(!ec, DataError, "cannot list ", dir.string(), ": ", ec.message());
    std::error_code type_error;  // a link to nowhere is no folder: a file, which fails when read
    const bool is_folder = it->is_directory(type_error);
    const std::string name = it->path().filename().string();
    if (name.front() == '.') {
      if (is_folder) it.disable_recursion_pending();
      if (is_folder || has_image_extension(name)) {
        const std::string path = it->path().string();  // the walk is unordered: keep the first by path
        if (listing.hidden++ == 0 || path < listing.first_hidden) listing.first_hidden = path;
      }
      continue;
    }
    if (is_folder) {
      open_folders.resize(static_cast<size_t>(it.depth()) + 1);
      const auto id = folder_id(it->path());
      DPT_CHECK(std::find(open_folders.begin(), open_folders.end(), id) == open_folders.end(), DataError,
                it->path().string(), " leads back to a folder it is in (a link loop): the image folder's walk, "
                "which follows links as torchvision's does, would not end. Remove or replace that link");
      open_folders.push_back(id);
      continue;
    }
    if (has_image_extension(name)) found.emplace_back(it->path().parent_path().string(), name);
  }
  std::sort(found.begin(), found.end());
  listing.paths.reserve(found.size());
  for (auto& [directory, name] : found) listing.paths.push_back(directory + "/" + name);
  return listing;
}

}  // namespace

ImageFolder::ImageFolder(const std::string& root, Transform transform, BadImagePolicy policy)
    : root_(root), transform_(std::move(transform)) {
  std::error_code ec;
  DPT_CHECK(fs::is_directory(root, ec), DataError, "image folder ", root,
            " does not exist or is not a directory; expected ROOT/<class>/<image> files");
  for (const auto& entry : fs::directory_iterator(root, ec)) {
    std::error_code type_error;  // a link to nowhere, or a loop of links, is no class folder
    if (!entry.is_directory(type_error)) continue;
    std::string name = entry.path().filename().string();
    // A hidden folder (Jupyter's .ipynb_checkpoints, a .git) sorts before every class and would
    // shift each one's index; torchvision counts it, then refuses it when it holds no image.
    if (name.front() == '.') {
      warnings_.push_back(str("folder ", entry.path().string(), " is hidden: not a class, left out"));
      continue;
    }
    classes_.push_back(std::move(name));
  }
  DPT_CHECK(!ec, DataError, "cannot list ", root, ": ", ec.message());
  std::sort(classes_.begin(), classes_.end());
  DPT_CHECK(!classes_.empty(), DataError, "image folder ", root,
            " has no class sub-folders; expected ROOT/<class>/<image> files");
  int64_t hidden = 0;
  std::string first_hidden;
  for (size_t label = 0; label < classes_.size(); ++label) {
    const fs::path dir = fs::path(root) / classes_[label];
    auto [paths, hidden_here, first_hidden_here] = list_images(dir);
    if (hidden == 0) first_hidden = first_hidden_here;
    hidden += hidden_here;
    if (paths.empty()) {
      const std::string message = str("class folder ", dir.string(), " (class ", label, ") has no image files");
      DPT_CHECK(policy == BadImagePolicy::Skip, DataError, message,
                "; add images or remove the folder (the class indices depend on the folder list)");
      warnings_.push_back(message);
    }
    for (auto& p : paths) {
      files_.push_back(std::move(p));
      labels_.push_back(static_cast<int64_t>(label));
    }
  }
  if (hidden > 0) {
    warnings_.push_back(str(hidden, " hidden file(s) and folder(s) in the class folders of ", root, ", such as ",
                            first_hidden, ", are no images: left out"));
  }
  // Empty class folders are skipped with a warning; all of them empty is a wrong folder.
  DPT_CHECK(!files_.empty(), DataError, "image folder ", root, " has ", classes_.size(),
            " class folder(s) and no image file in any of them (", join(image_extensions(), ", "),
            "); expected ROOT/<class>/<image> files");
}

int64_t ImageFolder::get(int64_t index, int64_t epoch, float* out) const {
  check_index(index);
  transform_.apply_encoded(read_file(files_[index]), files_[index], epoch, index, out);
  return labels_[index];
}

std::string ImageFolder::describe(int64_t index) const { return files_.at(index); }

}  // namespace dpt::data
