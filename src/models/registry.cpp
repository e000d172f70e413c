#include "dptrain/models/registry.h"

#include <utility>

#include "dptrain/common/error.h"

namespace dpt::models {
namespace {

using Factory = ResNet (*)(const ResNetOptions&);

// The one list of names; names() and create() both read it, so they cannot disagree.
const std::vector<std::pair<std::string, Factory>>& factories() {
  static const std::vector<std::pair<std::string, Factory>> table = {
      {"resnet18", resnet18}, {"resnet34", resnet34},   {"resnet50", resnet50},
      {"resnet101", resnet101}, {"resnet152", resnet152}, {"resnet20", resnet20},
      {"resnet56", resnet56},
  };
  return table;
}

}  // namespace

ResNet create(const std::string& name, const ResNetOptions& options) {
  for (const auto& [known, factory] : factories()) {
    if (known == name) return factory(options);
  }
  std::string known;
  for (const auto& entry : names()) known += (known.empty() ? "" : ", ") + entry;
  throw ConfigError(str("unknown model architecture '", name, "'; choose one of: ", known));
}

std::vector<std::string> names() {
  std::vector<std::string> result;
  for (const auto& entry : factories()) result.push_back(entry.first);
  return result;
}

}  // namespace dpt::models
