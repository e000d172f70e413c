// `dptrain models [NAME...]`: the model registry, one line per architecture, with its parameter
// count and its forward multiply-adds at its input size (1000 classes, counted on a model built
// here, so they are what `train -a` gets) and the ImageNet evaluation transform of torchvision's
// default weights; --json for a JSON array.

#include <iostream>
#include <memory>
#include <string>
#include <vector>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "command.h"
#include "dptrain/data/interpolation.h"
#include "dptrain/models/multiply_adds.h"
#include "dptrain/models/registry.h"

namespace dpt::cli {

namespace {

struct ModelsFlags {
  std::vector<std::string> names;
  bool json = false;
};

struct ModelSize {
  int64_t parameters = 0;
  double forward_multiply_adds = 0;
};

ModelSize size_of(const models::ModelInfo& info) {
  torch::NoGradGuard no_grad;
  auto model = models::create(info.name);
  ModelSize size;
  for (const auto& param : model->parameters()) size.parameters += param.numel();
  size.forward_multiply_adds = models::forward_multiply_adds(model, info.crop_size);
  return size;
}

int run_models(const ModelsFlags& flags) {
  std::vector<models::ModelInfo> chosen;
  for (const auto& name : flags.names) chosen.push_back(models::info(name));  // ConfigError for unknown names
  if (flags.names.empty()) chosen = models::registry();
  auto listing = nlohmann::json::array();
  if (!flags.json) {
    std::cout << fmt::format("{:<20} {:<20} {:>12}  {:>7}  {:>5}  {:>6}  {}\n", "name", "family", "parameters",
                             "GMACs", "input", "resize", "interpolation");
  }
  for (const auto& info : chosen) {
    const ModelSize size = size_of(info);
    if (flags.json) {
      listing.push_back({{"name", info.name},
                         {"family", info.family},
                         {"parameters", size.parameters},
                         {"forward_multiply_adds", size.forward_multiply_adds},
                         {"crop_size", info.crop_size},
                         {"resize_size", info.resize_size},
                         {"interpolation", data::to_string(info.interpolation)},
                         {"mean_std", info.half_normalization ? "0.5" : "imagenet"}});
      continue;
    }
    std::cout << fmt::format("{:<20} {:<20} {:>12}  {:>7.2f}  {:>5}  {:>6}  {}{}\n", info.name, info.family,
                             size.parameters, size.forward_multiply_adds / 1e9, info.crop_size, info.resize_size, data::to_string(info.interpolation),
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
      "models", "List the model architectures (-a NAME) with parameter and multiply-add counts and torchvision's input sizes");
  app->add_option("names", flags->names, "only these architectures (default: all; counting all takes a while)");
  app->add_flag("--json", flags->json, "one JSON array instead of the table");
  return {app, [flags](const std::vector<std::string>&) { return run_models(*flags); }};
}

}  // namespace dpt::cli
