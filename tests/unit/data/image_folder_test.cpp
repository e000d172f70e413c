#include "dptrain/data/image_folder.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <filesystem>
#include <fstream>

#include "dptrain/common/error.h"
#include "support/python_oracle.h"
#include "support/temp_dir.h"
#include "support/test_images.h"

using namespace dpt::data;
namespace fs = std::filesystem;

namespace {

Transform small_eval() { return Transform(TransformOptions().resize(12).size(8)); }

void put_jpeg(const std::string& path, int variant = 0) {
  fs::create_directories(fs::path(path).parent_path());
  write_file(path, encode_jpeg(dpt::testing::gradient_image(20, 16, variant), 90));
}

}  // namespace

TEST(ImageFolder, ListsLikeTorchvision) {
  dpt::testing::TempDir dir;
  const std::string root = dir.path();
  put_jpeg(root + "/zebra/b.jpg");
  put_jpeg(root + "/zebra/A.JPG");
  put_jpeg(root + "/zebra/nested/c.jpeg");
  put_jpeg(root + "/Ant/x.png.jpg");
  put_jpeg(root + "/Ant/y.jpg");
  put_jpeg(root + "/cat/1.jpg");
  std::ofstream(root + "/cat/notes.txt") << "not an image";
  std::ofstream(root + "/README") << "not a class";

  ImageFolder folder(root, small_eval());
  EXPECT_EQ(folder.classes(), (std::vector<std::string>{"Ant", "cat", "zebra"}));
  ASSERT_EQ(folder.size(), 6);
  auto expected = dpt::testing::run_python(
      "from torchvision.datasets import ImageFolder\n"
      "ds = ImageFolder('" +
      root +
      "')\n"
      "print(' '.join(ds.classes))\n"
      "for path, label in ds.samples: print(path, label)\n");
  if (!expected) DPT_MISSING_DEPENDENCY(dpt::testing::oracle_missing("torchvision"));
  std::string ours = "Ant cat zebra\n";
  for (int64_t i = 0; i < folder.size(); ++i) ours += dpt::str(folder.path(i), " ", folder.label(i), "\n");
  EXPECT_EQ(ours, *expected);
}

TEST(ImageFolder, ReadsJpegAndPng) {
  dpt::testing::TempDir dir;
  put_jpeg(dir.path() + "/a/1.jpg");
  fs::create_directories(dir.path() + "/b");
  const std::string png = dir.path() + "/b/2.png";
  auto made = dpt::testing::run_python(
      "from PIL import Image\n"
      "Image.new('RGB', (20, 16), (10, 200, 30)).save('" +
      png + "')\n");
  if (!made) DPT_MISSING_DEPENDENCY(dpt::testing::oracle_missing("PIL"));
  ImageFolder folder(dir.path(), small_eval());
  std::vector<float> out(folder.sample_numel());
  EXPECT_EQ(folder.get(0, 0, out.data()), 0);
  EXPECT_EQ(folder.get(1, 0, out.data()), 1);
  // A flat (10, 200, 30) image normalizes to the same value everywhere in each plane.
  EXPECT_FLOAT_EQ(out[0], (10 / 255.0f - 0.485f) / 0.229f);
  EXPECT_FLOAT_EQ(out[64 + 5], (200 / 255.0f - 0.456f) / 0.224f);
}

TEST(ImageFolder, MissingAndEmptyFoldersAreDataErrors) {
  dpt::testing::TempDir dir;
  try {
    ImageFolder(dir.path() + "/nope", small_eval());
    FAIL() << "no error for a missing folder";
  } catch (const dpt::DataError& e) {
    EXPECT_EQ(std::string(e.what()), "image folder " + dir.path() +
                                         "/nope does not exist or is not a directory; expected "
                                         "ROOT/<class>/<image> files");
  }
  EXPECT_THROW(ImageFolder(dir.path(), small_eval()), dpt::DataError);  // no classes
  // Class folders, none holding an image: even when empty classes are skipped.
  fs::create_directories(dir.path() + "/a");
  fs::create_directories(dir.path() + "/b");
  put_jpeg(dir.path() + "/a/notes.txt");
  try {
    ImageFolder(dir.path(), small_eval(), BadImagePolicy::Skip);
    FAIL() << "no error for class folders without images";
  } catch (const dpt::DataError& e) {
    EXPECT_EQ(std::string(e.what()), "image folder " + dir.path() +
                                         " has 2 class folder(s) and no image file in any of them (.jpg, .jpeg, "
                                         ".png, .ppm, .bmp, .pgm, .tif, .tiff, .webp); expected ROOT/<class>/<image> "
                                         "files");
  }
  fs::remove_all(dir.path() + "/a");
  put_jpeg(dir.path() + "/a/1.jpg");
  fs::create_directories(dir.path() + "/b");
  put_jpeg(dir.path() + "/c/1.jpg");
  try {
    ImageFolder(dir.path(), small_eval());
    FAIL() << "no error for an empty class";
  } catch (const dpt::DataError& e) {
    EXPECT_NE(std::string(e.what()).find("class folder " + dir.path() + "/b (class 1) has no image files"),
              std::string::npos)
        << e.what();
  }
  ImageFolder skipping(dir.path(), small_eval(), BadImagePolicy::Skip);
  EXPECT_EQ(skipping.num_classes(), 3);
  EXPECT_EQ(skipping.label(1), 2);  // class indices keep the empty folder's slot
  ASSERT_EQ(skipping.warnings().size(), 1u);
}

// A hidden folder sorts before every class: as a class it would shift each index (and, empty,
// fail the run). It is left out and said so, under either policy.
TEST(ImageFolder, AHiddenFolderIsNoClass) {
  dpt::testing::TempDir dir;
  put_jpeg(dir.path() + "/a/1.jpg");
  put_jpeg(dir.path() + "/b/1.jpg");
  fs::create_directories(dir.path() + "/.ipynb_checkpoints");
  put_jpeg(dir.path() + "/.thumbnails/1.jpg");
  for (const auto policy : {BadImagePolicy::Error, BadImagePolicy::Skip}) {
    ImageFolder folder(dir.path(), small_eval(), policy);
    EXPECT_EQ(folder.classes(), (std::vector<std::string>{"a", "b"}));
    EXPECT_EQ(folder.size(), 2);
    EXPECT_EQ(folder.label(1), 1);
    auto warnings = folder.warnings();
    std::sort(warnings.begin(), warnings.end());
    EXPECT_EQ(warnings, (std::vector<std::string>{
                            "folder " + dir.path() + "/.ipynb_checkpoints is hidden: not a class, left out",
                            "folder " + dir.path() + "/.thumbnails is hidden: not a class, left out"}));
  }
}

// macOS leaves a ._ metadata file beside every image copied off its disks: torchvision lists
// them as images and fails to open them. Hidden files and folders in a class are no images of it.
TEST(ImageFolder, HiddenFilesAndFoldersInAClassAreNoImages) {
  dpt::testing::TempDir dir;
  put_jpeg(dir.path() + "/a/1.jpg");
  put_jpeg(dir.path() + "/a/sub/2.jpg");
  std::ofstream(dir.path() + "/a/._1.jpg") << "AppleDouble metadata, not an image";
  put_jpeg(dir.path() + "/a/.ipynb_checkpoints/1-checkpoint.jpg");
  put_jpeg(dir.path() + "/b/1.png");
  std::ofstream(dir.path() + "/b/.DS_Store") << "no image extension: never listed";
  for (const auto policy : {BadImagePolicy::Error, BadImagePolicy::Skip}) {
    ImageFolder folder(dir.path(), small_eval(), policy);
    EXPECT_EQ(folder.size(), 3);
    EXPECT_EQ(folder.path(0), dir.path() + "/a/1.jpg");
    EXPECT_EQ(folder.path(1), dir.path() + "/a/sub/2.jpg");
    EXPECT_EQ(folder.path(2), dir.path() + "/b/1.png");
    EXPECT_EQ(folder.warnings(), (std::vector<std::string>{
                                     "2 hidden file(s) and folder(s) in the class folders of " + dir.path() +
                                     ", such as " + dir.path() + "/a/._1.jpg, are no images: left out"}));
  }
}

TEST(ImageFolder, FollowsLinksToFoldersButNamesALinkLoop) {
  dpt::testing::TempDir dir;
  const std::string root = dir.path();
  put_jpeg(root + "/shared/1.jpg");
  put_jpeg(root + "/a/own.jpg");
  fs::create_directory_symlink(root + "/shared", root + "/a/linked");   // followed, as torchvision does
  fs::create_symlink(root + "/nowhere.jpg", root + "/a/dangling.jpg");  // listed; fails when read
  fs::create_symlink(root + "/loop", root + "/loop");                   // at the top: no class
  ImageFolder folder(root, small_eval());
  ASSERT_EQ(folder.classes(), (std::vector<std::string>{"a", "shared"}));
  ASSERT_EQ(folder.size(), 4);
  EXPECT_EQ(folder.path(0), root + "/a/dangling.jpg");
  EXPECT_EQ(folder.path(2), root + "/a/linked/1.jpg");

  fs::create_directory_symlink(root + "/a", root + "/a/linked/back");  // shared/back -> a -> linked -> shared
  try {
    ImageFolder looped(root, small_eval());
    FAIL() << "no error for a link loop";
  } catch (const dpt::DataError& e) {
    EXPECT_EQ(std::string(e.what()), root + "/a/linked/back leads back to a folder it is in (a link loop): the "
                                             "image folder's walk, which follows links as torchvision's does, "
                                             "would not end. Remove or replace that link");
  }
}
