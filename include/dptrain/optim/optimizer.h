#pragma once
// The optimizers of torchvision's classification recipes (references/classification/train.py,
// `--opt`), built over parameter groups as its set_weight_decay builds them, so that a recipe's
// flags give the same groups, hyper-parameters and steps as in Python:
//
//   auto options = dpt::optim::OptimizerOptions().kind(dpt::optim::OptimizerKind::AdamW)
//                      .weight_decay(0.05).norm_weight_decay(0.0);
//   auto optimizer = dpt::optim::make_optimizer(*model, options, /*lr=*/1e-3);
//
//   sgd            torch.optim.SGD(momentum, weight_decay)
//   sgd_nesterov   the same with nesterov=True
//   rmsprop        torch.optim.RMSprop(momentum, weight_decay, eps=0.0316, alpha=0.9)
//   adamw          torch.optim.AdamW(weight_decay), betas (0.9, 0.999), eps 1e-8

#include <memory>
#include <optional>
#include <string>
#include <vector>

#include <torch/arg.h>
#include <torch/nn/module.h>
#include <torch/optim/optimizer.h>

namespace dpt::optim {

enum class OptimizerKind { Sgd, SgdNesterov, RmsProp, AdamW };

// torchvision's --opt names: "sgd", "sgd_nesterov", "rmsprop", "adamw" (any case); ConfigError
// naming them otherwise.
OptimizerKind parse_optimizer_kind(const std::string& name);
std::string to_string(OptimizerKind kind);

struct OptimizerOptions {
  TORCH_ARG(OptimizerKind, kind) = OptimizerKind::Sgd;
  // SGD's and RMSprop's momentum (AdamW has its betas instead).
  TORCH_ARG(double, momentum) = 0.9;
  TORCH_ARG(double, weight_decay) = 1e-4;
  // Weight decay of the normalisation layers' parameters (batch, layer, group and instance norms,
  // synchronised or not). Unset: weight_decay.
  TORCH_ARG(std::optional<double>, norm_weight_decay) = std::nullopt;
  // Weight decay of every parameter named `bias` (norm layers' included, as in torchvision).
  // Unset: that of its layer's group.
  TORCH_ARG(std::optional<double>, bias_weight_decay) = std::nullopt;
  // Before each step, the gradients (averaged over the ranks, unscaled) are scaled down to this
  // total 2-norm when above it, as torch.nn.utils.clip_grad_norm_ does. Unset: no clipping.
  TORCH_ARG(std::optional<double>, clip_grad_norm) = std::nullopt;
};

// A parameter group as torchvision's set_weight_decay forms it: "other", "norm", "bias", in that
// order, empty ones left out.
struct ParameterGroup {
  std::string name;
  double weight_decay = 0;
  std::vector<std::string> parameter_names;  // as model.named_parameters() names them
  std::vector<at::Tensor> parameters;
};

// The groups of the parameters of `model` that require gradients, each in the model's order.
std::vector<ParameterGroup> weight_decay_groups(const torch::nn::Module& model, const OptimizerOptions& options);

// The optimizer `options` names over weight_decay_groups(model, options), with learning rate
// `lr` (the schedule sets it at every step).
std::shared_ptr<torch::optim::Optimizer> make_optimizer(const torch::nn::Module& model,
                                                        const OptimizerOptions& options, double lr);

// make_optimizer in two halves, for a wrapper that builds the optimizer over part of the groups
// (ZeroRedundancyOptimizer, over a rank's shard): weight_decay_groups(model, options), each with
// the kind's options at rate `lr` and its own decay; and the kind's optimizer over any groups.
std::vector<torch::optim::OptimizerParamGroup> optimizer_param_groups(const torch::nn::Module& model,
                                                                      const OptimizerOptions& options, double lr);
std::shared_ptr<torch::optim::Optimizer> make_optimizer(std::vector<torch::optim::OptimizerParamGroup> groups,
                                                        const OptimizerOptions& options, double lr);

}  // namespace dpt::optim
