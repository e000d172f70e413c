// `dptrain models [NAME...]`: the model registry, one line per architecture, with its parameter
// count (1000 classes, counted on a model built here, so it is the count `train -a` gets) and
// the ImageNet evaluation transform of torchvision's default weights; --json for a JSON array.

#include <iostream>
#include <memory>
#include <string>
#include <vector>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "command.h"
#include "dptrain/data/interpolation.h"
#include "dptrain/models/registry.h"

namespace dpt::cli {

namespace {

struct ModelsFlags {
  std::vector<std::string> names;
  bool json = false;
};

int64_t parameter_count(const std::string& name) {
  torch::NoGradGuard no_grad;
  int64_t count = 0;
  for (const auto& param : models::create(name)->parameters()) count += param.numel();
  return count;
}

int run_models(const ModelsFlags& flags) {
  std::vector<models::ModelInfo> chosen;
  for (const auto& name : flags.names) chosen.push_back(models::info(name));  // ConfigError for unknown names
  if (flags.names.empty()) chosen = models::registry();
  auto listing = nlohmann::json::array();
  if (!flags.json) {
    std::cout << fmt::format("{:<20} {:<20} {:>12}  {:>5}  {:>6}  {}\n", "name", "family", "parameters", "input",
                             "resize", "interpolation");
  }
  for (const auto& info : chosen) {
    const int64_t parameters = parameter_count(info.name);
    if (flags.json) {
      listing.push_back({{"name", info.name},
                         {"family", info.family},
                         {"parameters", parameters},
                         {"crop_size", info.crop_size},
                         {"resize_size", info.resize_size},
                         {"interpolation", data::to_string(info.interpolation)},
                         {"mean_std", info.half_normalization ? "0.5" : "imagenet"}});
      continue;
    }
    std::cout << fmt::format("{:<20} {:<20} {:>12}  {:>5}  {:>6}  {}{}\n", info.name, info.family, parameters,
                             info.crop_size, info.resize_size, data::to_string(info.interpolation),
                             info.half_normalization ? ", mean/std 0.5" : "")
              << std::flush;
  }
  if (flags.json) std::cout << listing.dump() << "\n";
  return 0;
}

}  // namespace

Command add_models_command(CLI::App& root) {
  auto flags = std::make_shared<ModelsFlags>();
  CLI::App* app = root.add_subcommand(
      "models", "List the model architectures (-a NAME) with parameter counts and torchvision's input sizes");
  app->add_option("names", flags->names, "only these architectures (default: all; counting all takes a while)");
  app->add_flag("--json", flags->json, "one JSON array instead of the table");
  return {app, [flags](const std::vector<std::string>&) { return run_models(*flags); }};
}

}  // namespace dpt::cli
