#pragma once
// The parameter server's side of the run's options, shared by its workers' style (ps.cpp) and its
// servers' role (ps_server_role.cpp).

#include <vector>

#include <torch/nn/module.h>

#include "dptrain/parallel/ps/options.h"
#include "dptrain/train/train_options.h"

namespace dpt::train {

// The parameters the servers hold (those that require gradients, in the model's order), each with
// its optimizer group's weight decay.
std::vector<ps::ServedParameter> served_parameters(const torch::nn::Module& model,
                                                   const optim::OptimizerOptions& options);

// The servers' options and their SGD rule, from the run's (whose checks are the style's:
// check_style_options).
ps::PsOptions ps_options(const TrainOptions& options);
ps::SgdRule ps_sgd_rule(const TrainOptions& options);

}  // namespace dpt::train
