// Moves models between dptrain and torchvision for test_models_oracle.py (built with the tests,
// not installed).
//
//   dptrain_models_oracle keys   <num_classes> <arch>[:<image_size>]...
//       for each architecture "== <arch>", then one line per state-dict entry: name, shape, dtype,
//       then "parameters <count>"
// (keys and export take many architectures: LibTorch takes a second to start)
//   dptrain_models_oracle export <num_classes> <dir> <arch>:<image_size>...
//       for each architecture randomises the model (seeded), writes <dir>/<arch>/state.pt and
//       <dir>/<arch>/io.pt = {input, logits}, the input two images of image_size pixels square
//   dptrain_models_oracle import <arch> <num_classes> <state.pt> <io.pt> <out.pt>
//       loads state.pt; io.pt holds "input" and, optionally, "weights" (one per logit). Writes to
//       out.pt the eval-mode "logits"; with weights also, in training mode with dropout and
//       stochastic depth off, the gradient of sum(weights * logits) (plus each auxiliary head's
//       weighted the same way) as "grad.<parameter name>", and the training "train_logits".
//
// The image size of networks built for one (ViT) is io.pt's input size. Exit status 1 with
// "error: <message>" on stderr for any dptrain error.

#include <cstdlib>
#include <filesystem>
#include <iostream>
#include <string>
#include <vector>

#include <torch/torch.h>

#include "dptrain/common/error.h"
#include "dptrain/compat/onednn.h"
#include "dptrain/models.h"

namespace models = dpt::models;

namespace {

bool ends_with(const std::string& text, const std::string& suffix) {
  return text.size() >= suffix.size() && text.compare(text.size() - suffix.size(), suffix.size(), suffix) == 0;
}

// Norm statistics and affine terms away from their 1/0 defaults, so a mix-up between any two
// of them changes the logits, ConvNeXt's layer scales up from 1e-6, so its blocks show in the
// logits, and zero-initialised matrices (ViT's head) random; other weights
// keep their (seeded) random initialisation.
void randomise_norms(models::Classifier& model) {
  torch::NoGradGuard no_grad;
  for (auto& entry : models::state_dict(*model)) {
    auto& t = entry.value();
    const std::string& key = entry.key();
    if (ends_with(key, "num_batches_tracked")) {
      t.fill_(7);
    } else if (t.dim() == 2 && !t.any().item<bool>()) {
      t.normal_(0, 0.02);
    } else if (ends_with(key, "running_var") || ends_with(key, "layer_scale") ||
               (t.dim() == 1 && ends_with(key, ".weight"))) {
      t.copy_(torch::rand_like(t) + 0.5);
    } else if (ends_with(key, "running_mean") || (t.dim() == 1 && ends_with(key, ".bias"))) {
      t.copy_((torch::rand_like(t) - 0.5) * 0.2);
    }
  }
}

torch::Tensor eval_logits(models::Classifier& model, const torch::Tensor& input) {
  torch::NoGradGuard no_grad;
  model->eval();
  return model(input);
}

models::Classifier make(const std::string& arch, int64_t num_classes, std::optional<int64_t> image_size) {
  torch::manual_seed(0);
  // Dropout and stochastic depth off, so that a training forward is deterministic.
  return models::create(arch, models::ClassifierOptions()
                                  .num_classes(num_classes)
                                  .dropout(0.0)
                                  .stochastic_depth(0.0)
                                  .image_size(image_size));
}

void keys(models::Classifier& model) {
  int64_t parameters = 0;
  for (const auto& p : model->parameters()) parameters += p.numel();
  for (const auto& entry : models::state_dict(*model)) {
    std::cout << entry.key() << " " << entry.value().sizes() << " " << entry.value().scalar_type() << "\n";
  }
  std::cout << "parameters " << parameters << "\n";
}

void export_model(models::Classifier& model, const std::string& dir, int64_t image_size) {
  randomise_norms(model);
  torch::manual_seed(1);
  auto input = torch::randn({2, 3, image_size, image_size});
  models::write_state_dict(models::state_dict(*model), dir + "/state.pt");
  models::StateDict io;
  io.insert("input", input);
  io.insert("logits", eval_logits(model, input));
  models::write_state_dict(io, dir + "/io.pt");
}

int import_model(models::Classifier& model, const std::string& state, const models::StateDict& io,
                 const std::string& out_path) {
  models::load_state_dict(*model, models::read_state_dict(state));
  const auto& input = io["input"];
  models::StateDict out;
  out.insert("logits", eval_logits(model, input));
  if (!io.contains("weights")) {
    models::write_state_dict(out, out_path);
    return 0;
  }
  model->train();
  auto logits = model(input);
  auto objective = (logits * io["weights"]).sum();
  for (const auto& aux : model->take_auxiliary_logits()) objective = objective + (aux.logits * io["weights"]).sum();
  objective.backward();
  for (const auto& param : model->named_parameters()) out.insert("grad." + param.key(), param.value().grad());
  out.insert("train_logits", logits.detach());
  models::write_state_dict(out, out_path);
  return 0;
}

// "<arch>" or "<arch>:<image_size>".
struct ArchSpec {
  std::string arch;
  std::optional<int64_t> image_size;
};

ArchSpec parse_spec(const std::string& text) {
  const size_t colon = text.find(':');
  if (colon == std::string::npos) return {text, std::nullopt};
  return {text.substr(0, colon), std::stoll(text.substr(colon + 1))};
}

int run(const std::vector<std::string>& args) {
  const auto usage = "usage: dptrain_models_oracle keys <num_classes> <arch>[:<image_size>]... | export "
                     "<num_classes> <dir> <arch>:<image_size>... | import <arch> <num_classes> <state> <io> <out>";
  DPT_CHECK(args.size() >= 3, ConfigError, usage);
  const std::string& command = args[0];
  if (command == "keys") {
    for (size_t i = 2; i < args.size(); ++i) {
      const ArchSpec spec = parse_spec(args[i]);
      auto model = make(spec.arch, std::stoll(args[1]), spec.image_size);
      std::cout << "== " << spec.arch << "\n";
      keys(model);
    }
    return 0;
  }
  if (command == "export") {
    for (size_t i = 3; i < args.size(); ++i) {
      const ArchSpec spec = parse_spec(args[i]);
      DPT_CHECK(spec.image_size, ConfigError, usage);
      auto model = make(spec.arch, std::stoll(args[1]), spec.image_size);
      const std::filesystem::path dir = std::filesystem::path(args[2]) / spec.arch;
      std::filesystem::create_directories(dir);
      export_model(model, dir.string(), *spec.image_size);
    }
    return 0;
  }
  const int64_t num_classes = std::stoll(args[2]);
  if (command == "import" && args.size() == 6) {
    auto io = models::read_state_dict(args[4]);
    auto model = make(args[1], num_classes, io["input"].size(2));
    return import_model(model, args[3], io, args[5]);
  }
  throw dpt::ConfigError(usage);
}

}  // namespace

int main(int argc, char** argv) {
  // As dptrain-torch and the Python side (torchvision_zoo.py): where oneDNN cannot plan, neither uses it.
  dpt::compat::avoid_onednn_where_it_cannot_plan();
  try {
    return run(std::vector<std::string>(argv + 1, argv + argc));
  } catch (const dpt::Error& error) {
    std::cerr << "error: " << error.what() << "\n";
    return 1;
  }
}
