#pragma once
// Models by name, for command lines and configuration files (`dptrain train -a resnet50`).
//
//   auto model = dpt::models::create("resnet50", dpt::models::ResNetOptions().num_classes(100));
//   for (const auto& name : dpt::models::names()) std::cout << name << "\n";

#include <string>
#include <vector>

#include "dptrain/models/resnet.h"

namespace dpt::models {

// The model called `name` (one of names()); throws ConfigError listing the known names otherwise.
ResNet create(const std::string& name, const ResNetOptions& options = ResNetOptions());

// Every name create() accepts: resnet18, resnet34, resnet50, resnet101, resnet152 (torchvision),
// then the CIFAR nets resnet20 and resnet56.
std::vector<std::string> names();

}  // namespace dpt::models
