// Moves models between dptrain and torchvision for test_models_oracle.py (built with the tests,
// not installed).
//
//   dptrain_models_oracle keys   <arch> <num_classes>
//       one line per state-dict entry: name, shape, dtype; then "parameters <count>"
//   dptrain_models_oracle export <arch> <num_classes> <dir>
//       randomises the model (seeded), writes <dir>/state.pt and <dir>/io.pt = {input, logits}
//   dptrain_models_oracle import <arch> <num_classes> <state.pt> <io.pt> <logits.pt>
//       loads state.pt, runs eval-mode forward on io.pt's "input", writes {"logits"}
//
// Exit status 1 with "error: <message>" on stderr for any dptrain error.

#include <cstdlib>
#include <iostream>
#include <string>
#include <vector>

#include <torch/torch.h>

#include "dptrain/common/error.h"
#include "dptrain/models.h"

namespace models = dpt::models;

namespace {

bool ends_with(const std::string& text, const std::string& suffix) {
  return text.size() >= suffix.size() && text.compare(text.size() - suffix.size(), suffix.size(), suffix) == 0;
}

// Norm statistics and affine terms away from their 1/0 defaults, so a mix-up between any two
// of them changes the logits; convolutions and fc keep their (seeded) random initialisation.
void randomise_norms(models::ResNet& model) {
  torch::NoGradGuard no_grad;
  for (auto& entry : models::state_dict(*model)) {
    auto& t = entry.value();
    const std::string& key = entry.key();
    if (ends_with(key, "num_batches_tracked")) {
      t.fill_(7);
    } else if (ends_with(key, "running_var") || (t.dim() == 1 && ends_with(key, ".weight") && key != "fc.weight")) {
      t.copy_(torch::rand_like(t) + 0.5);
    } else if (ends_with(key, "running_mean") || (t.dim() == 1 && ends_with(key, ".bias") && key != "fc.bias")) {
      t.copy_((torch::rand_like(t) - 0.5) * 0.2);
    }
  }
}

torch::Tensor eval_logits(models::ResNet& model, const torch::Tensor& input) {
  torch::NoGradGuard no_grad;
  model->eval();
  return model(input);
}

int keys(models::ResNet& model) {
  int64_t parameters = 0;
  for (const auto& p : model->parameters()) parameters += p.numel();
  for (const auto& entry : models::state_dict(*model)) {
    std::cout << entry.key() << " " << entry.value().sizes() << " " << entry.value().scalar_type() << "\n";
  }
  std::cout << "parameters " << parameters << "\n";
  return 0;
}

int export_model(models::ResNet& model, const std::string& dir) {
  randomise_norms(model);
  torch::manual_seed(1);
  auto input = torch::randn({2, 3, 64, 64});
  models::write_state_dict(models::state_dict(*model), dir + "/state.pt");
  models::StateDict io;
  io.insert("input", input);
  io.insert("logits", eval_logits(model, input));
  models::write_state_dict(io, dir + "/io.pt");
  return 0;
}

int import_model(models::ResNet& model, const std::string& state, const std::string& io,
                 const std::string& logits) {
  models::load_state_dict(*model, models::read_state_dict(state));
  models::StateDict out;
  out.insert("logits", eval_logits(model, models::read_state_dict(io)["input"]));
  models::write_state_dict(out, logits);
  return 0;
}

int run(const std::vector<std::string>& args) {
  const auto usage = "usage: dptrain_models_oracle keys|export|import <arch> <num_classes> [files...]";
  DPT_CHECK(args.size() >= 3, ConfigError, usage);
  torch::manual_seed(0);
  auto model = models::create(args[1], models::ResNetOptions().num_classes(std::stoll(args[2])));
  if (args[0] == "keys" && args.size() == 3) return keys(model);
  if (args[0] == "export" && args.size() == 4) return export_model(model, args[3]);
  if (args[0] == "import" && args.size() == 6) return import_model(model, args[3], args[4], args[5]);
  throw dpt::ConfigError(usage);
}

}  // namespace

int main(int argc, char** argv) {
  try {
    return run(std::vector<std::string>(argv + 1, argv + argc));
  } catch (const dpt::Error& error) {
    std::cerr << "error: " << error.what() << "\n";
    return 1;
  }
}
