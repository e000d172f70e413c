#pragma once
// torchvision's ImageFolder layout: ROOT/<class>/**/<image>. Classes are the sorted sub-folder
// names and get indices 0, 1, ... in that order; files are listed like torchvision's make_dataset
// (sorted walk, torchvision's image extensions, case-insensitive), so sample i and its label are
// the same as torchvision.datasets.ImageFolder(ROOT)[i]. One difference: hidden entries (named
// .*) are left out. A hidden folder (Jupyter's .ipynb_checkpoints) is no class, and hidden files
// and folders in a class (macOS's ._ metadata files) are no images of it. JPEG and PNG files are
// decoded (by content, not by extension); other formats fail as bad images.
//
//   dpt::data::ImageFolder train("/data/imagenet/train", dpt::data::Transform(train_options));
//   train.classes()[train.label(0)];   // "n01440764"

#include <string>
#include <vector>

#include "dptrain/data/dataset.h"
#include "dptrain/data/transform.h"

namespace dpt::data {

class ImageFolder : public Dataset {
 public:
  // Throws DataError if root is missing or has no class folders, and, under BadImagePolicy::Error,
  // if a class folder holds no images (torchvision refuses that too). Under Skip the empty classes
  // keep their index and are listed in warnings(), as are the hidden entries left out.
  ImageFolder(const std::string& root, Transform transform, BadImagePolicy policy = BadImagePolicy::Error);

  int64_t size() const override { return static_cast<int64_t>(files_.size()); }
  int64_t num_classes() const override { return static_cast<int64_t>(classes_.size()); }
  std::vector<int64_t> sample_shape() const override { return transform_.sample_shape(); }
  int64_t get(int64_t index, int64_t epoch, float* out) const override;
  std::string describe(int64_t index) const override;

  const std::vector<std::string>& classes() const { return classes_; }
  const std::string& path(int64_t index) const { return files_.at(index); }
  int64_t label(int64_t index) const { return labels_.at(index); }
  const std::vector<std::string>& warnings() const { return warnings_; }

 private:
  std::string root_;
  Transform transform_;
  std::vector<std::string> classes_;
  std::vector<std::string> files_;
  std::vector<int64_t> labels_;
  std::vector<std::string> warnings_;
};

}  // namespace dpt::data
