#pragma once
// Models by name, for command lines and configuration files (`dptrain train -a mobilenet_v2`):
// torchvision's classification names, the CIFAR ResNets, and TorchScript files saved from Python.
//
//   auto model = dpt::models::create("resnet50", dpt::models::ClassifierOptions().num_classes(100));
//   auto scripted = dpt::models::create("torchscript:/models/net.pt");
//   for (const auto& info : dpt::models::registry()) std::cout << info.name << " " << info.crop_size << "\n";

#include <cstdint>
#include <string>
#include <vector>

#include "dptrain/data/interpolation.h"
#include "dptrain/models/classifier.h"

namespace dpt::models {

// A registered architecture and the ImageNet evaluation transform of torchvision's default
// weights for it (resize the shorter side to resize_size, center-crop crop_size), which
// `dptrain train` and `eval` apply to ImageFolders (interpolation and normalisation in training
// too).
struct ModelInfo {
  std::string name;
  std::string family;
  int64_t crop_size = 224;
  int64_t resize_size = 256;
  data::Interpolation interpolation = data::Interpolation::Bilinear;
  // Normalisation of torchvision's weights: ImageNet's statistics, or 0.5 everywhere
  // (efficientnet_v2_l).
  bool half_normalization = false;
};

// The prefix of a TorchScript model's name: "torchscript:PATH" loads a module saved from Python
// with torch.jit.script(...).save(PATH) or torch.jit.trace(...).save(PATH).
inline constexpr const char* kTorchScriptPrefix = "torchscript:";

// The model called `name`: a registry name or kTorchScriptPrefix + path. Throws ConfigError
// listing the known names otherwise. A TorchScript model keeps its own classifier:
// options.num_classes must match it (checked by a forward of one image when given).
Classifier create(const std::string& name, const ClassifierOptions& options = ClassifierOptions());

// Every registered model, in the order `dptrain models` lists them.
const std::vector<ModelInfo>& registry();

// Every name create() accepts besides TorchScript files.
std::vector<std::string> names();

// The entry for `name`; for a TorchScript model, the ImageNet defaults under that name. Throws
// ConfigError for an unknown name.
ModelInfo info(const std::string& name);

}  // namespace dpt::models
