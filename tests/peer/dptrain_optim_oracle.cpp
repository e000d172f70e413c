// dptrain's side of the optimizer oracle test (tests/peer/test_optim_oracle.py): steps a model
// from Python's weights with Python's gradients, through the optimizer `dptrain train` builds for
// the same flags (clipping included), and writes what Python compares with torch.optim.
//
//   dptrain_optim_oracle DIR --arch A --image-size S --opt K --lr LR [--momentum M] [--wd W]
//                        [--norm-weight-decay N] [--bias-weight-decay B] [--clip-grad-norm C]
//     reads  DIR/initial.pt   a state dict (10 classes)
//            DIR/grads.pt     {"<parameter name>": [steps, *shape]}: the gradients of each step
//     writes DIR/final.pt     the state dict after the steps
//            DIR/optimizer.pt the optimizer's state dict, Python's layout
//     prints one line per parameter group: its weight decay, then its parameters' names
//
// Exit status 1 with "error: <message>" on stderr for any dptrain error.

#include <iostream>
#include <string>

#include <CLI/CLI.hpp>
#include <torch/torch.h>

#include "dptrain/common/error.h"
#include "dptrain/models.h"
#include "dptrain/train/checkpoint/checkpoint_file.h"
#include "dptrain/train/checkpoint/optimizer_state.h"
#include "dptrain/optim/optimizer.h"

namespace models = dpt::models;
namespace optim = dpt::optim;
namespace train = dpt::train;

namespace {

struct Flags {
  std::string dir, arch, opt = "sgd";
  int64_t image_size = 32;
  double lr = 0.1;
  optim::OptimizerOptions options;
};

int run(Flags& flags) {
  flags.options.kind(optim::parse_optimizer_kind(flags.opt));
  const auto& options = flags.options;
  auto model = models::create(flags.arch, models::ClassifierOptions().num_classes(10).image_size(flags.image_size));
  models::load_state_dict(*model, models::read_state_dict(flags.dir + "/initial.pt"));
  for (const auto& group : optim::weight_decay_groups(*model, options)) {
    std::cout << group.weight_decay;
    for (const auto& name : group.parameter_names) std::cout << " " << name;
    std::cout << "\n";
  }
  const auto grads = models::read_state_dict(flags.dir + "/grads.pt");
  auto optimizer = optim::make_optimizer(*model, options, flags.lr);
  const int64_t steps = grads[model->named_parameters().begin()->key()].size(0);
  for (int64_t step = 0; step < steps; ++step) {
    for (auto& param : model->named_parameters()) param.value().mutable_grad() = grads[param.key()][step].clone();
    if (options.clip_grad_norm()) torch::nn::utils::clip_grad_norm_(model->parameters(), *options.clip_grad_norm());
    optimizer->step();
  }
  models::write_state_dict(models::state_dict(*model), flags.dir + "/final.pt");
  train::save_checkpoint(train::optimizer_state_dict(*optimizer), flags.dir + "/optimizer.pt");
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app("dptrain_optim_oracle");
  Flags flags;
  app.add_option("dir", flags.dir)->required();
  app.add_option("--arch", flags.arch)->required();
  app.add_option("--image-size", flags.image_size);
  app.add_option("--opt", flags.opt);
  app.add_option("--lr", flags.lr);
  app.add_option("--momentum", flags.options.momentum());
  app.add_option("--wd", flags.options.weight_decay());
  app.add_option("--norm-weight-decay", flags.options.norm_weight_decay());
  app.add_option("--bias-weight-decay", flags.options.bias_weight_decay());
  app.add_option("--clip-grad-norm", flags.options.clip_grad_norm());
  CLI11_PARSE(app, argc, argv);
  try {
    return run(flags);
  } catch (const dpt::Error& e) {
    std::cerr << "error: " << e.what() << "\n";
    return 1;
  }
}
