#include "dptrain/optim/optimizer.h"

#include <algorithm>
#include <memory>
#include <type_traits>
#include <utility>

#include <torch/nn/modules/batchnorm.h>
#include <torch/nn/modules/instancenorm.h>
#include <torch/nn/modules/normalization.h>
#include <torch/optim/adamw.h>
#include <torch/optim/rmsprop.h>
#include <torch/optim/sgd.h>

#include "dptrain/common/error.h"
#include "dptrain/common/text.h"
#include "dptrain/compat/compat.h"
#include "dptrain/models/layers.h"
#include "dptrain/parallel/sync_batch_norm.h"
#include "dptrain/optim/fused_sgd.h"

namespace dpt::optim {

namespace {

constexpr std::pair<OptimizerKind, const char*> kNames[] = {{OptimizerKind::Sgd, "sgd"},
                                                            {OptimizerKind::SgdNesterov, "sgd_nesterov"},
                                                            {OptimizerKind::RmsProp, "rmsprop"},
                                                            {OptimizerKind::AdamW, "adamw"}};

// torchvision's norm_classes: the layers whose parameters norm_weight_decay applies to.
bool is_norm_layer(const torch::nn::Module& module) {
  const torch::nn::Module* m = &module;
  return dynamic_cast<const torch::nn::BatchNorm1dImpl*>(m) || dynamic_cast<const torch::nn::BatchNorm2dImpl*>(m) ||
         dynamic_cast<const torch::nn::BatchNorm3dImpl*>(m) || dynamic_cast<const SyncBatchNormImpl*>(m) ||
         dynamic_cast<const torch::nn::LayerNormImpl*>(m) || dynamic_cast<const models::LayerNorm2dImpl*>(m) ||
         dynamic_cast<const torch::nn::GroupNormImpl*>(m) ||
         dynamic_cast<const torch::nn::LocalResponseNormImpl*>(m) ||
         dynamic_cast<const torch::nn::InstanceNorm1dImpl*>(m) ||
         dynamic_cast<const torch::nn::InstanceNorm2dImpl*>(m) || dynamic_cast<const torch::nn::InstanceNorm3dImpl*>(m);
}

// set_weight_decay's walk: a module's own parameters, then its children's, depth first.
void collect(const torch::nn::Module& module, const std::string& prefix, const OptimizerOptions& options,
             std::vector<ParameterGroup>& groups) {
  for (const auto& param : module.named_parameters(/*recurse=*/false)) {
    if (!param.value().requires_grad()) continue;
    ParameterGroup* group = &groups[0];  // other
    if (options.bias_weight_decay() && param.key() == "bias") {
      group = &groups[2];
    } else if (options.norm_weight_decay() && is_norm_layer(module)) {
      group = &groups[1];
    }
    group->parameter_names.push_back(prefix.empty() ? param.key() : prefix + "." + param.key());
    group->parameters.push_back(param.value());
  }
  for (const auto& child : module.named_children()) {
    collect(*child.value(), prefix.empty() ? child.key() : prefix + "." + child.key(), options, groups);
  }
}

// Calls f(Optim*, defaults) with the LibTorch optimizer class `options` names (as a null pointer:
// a tag) and its hyper-parameters at rate `lr`.
template <typename F>
auto with_kind(const OptimizerOptions& options, double lr, F&& f) {
  DPT_CHECK(options.kind() != OptimizerKind::SgdNesterov || options.momentum() > 0, ConfigError,
            "sgd_nesterov needs a momentum above 0 (--momentum), got ", options.momentum());
  const double decay = options.weight_decay();
  switch (options.kind()) {
    case OptimizerKind::Sgd:
    case OptimizerKind::SgdNesterov:
      return f(static_cast<FusedSGD*>(nullptr), torch::optim::SGDOptions(lr)
                                                    .momentum(options.momentum())
                                                    .weight_decay(decay)
                                                    .nesterov(options.kind() == OptimizerKind::SgdNesterov));
    case OptimizerKind::RmsProp:
      // torchvision's eps and alpha, close to TensorFlow's RMSProp (eps inside the root there).
      return f(static_cast<torch::optim::RMSprop*>(nullptr),
               torch::optim::RMSpropOptions(lr).momentum(options.momentum()).weight_decay(decay).eps(0.0316).alpha(0.9));
    case OptimizerKind::AdamW:
      return f(static_cast<torch::optim::AdamW*>(nullptr), torch::optim::AdamWOptions(lr).weight_decay(decay));
  }
  throw Error("unknown optimizer kind");
}

}  // namespace

OptimizerKind parse_optimizer_kind(const std::string& name) {
  const std::string lower = ascii_lower(name);
  for (const auto& [kind, spelling] : kNames) {
    if (lower == spelling) return kind;
  }
  throw ConfigError(str("unknown optimizer '", name, "'; use sgd, sgd_nesterov, rmsprop or adamw"));
}

std::string to_string(OptimizerKind kind) {
  for (const auto& [known, spelling] : kNames) {
    if (known == kind) return spelling;
  }
  return "unknown";
}

std::vector<ParameterGroup> weight_decay_groups(const torch::nn::Module& model, const OptimizerOptions& options) {
  std::vector<ParameterGroup> groups{{"other", options.weight_decay(), {}, {}},
                                     {"norm", options.norm_weight_decay().value_or(0.0), {}, {}},
                                     {"bias", options.bias_weight_decay().value_or(0.0), {}, {}}};
  collect(model, "", options, groups);
  groups.erase(std::remove_if(groups.begin(), groups.end(), [](const auto& g) { return g.parameters.empty(); }),
               groups.end());
  return groups;
}

std::vector<torch::optim::OptimizerParamGroup> optimizer_param_groups(const torch::nn::Module& model,
                                                                      const OptimizerOptions& options, double lr) {
  return with_kind(options, lr, [&](auto*, const auto& defaults) {
    using Options = std::decay_t<decltype(defaults)>;
    std::vector<torch::optim::OptimizerParamGroup> groups;
    for (auto& group : weight_decay_groups(model, options)) {
      auto group_options = std::make_unique<Options>(defaults);
      group_options->weight_decay(group.weight_decay);
      groups.emplace_back(std::move(group.parameters), std::move(group_options));
    }
    return groups;
  });
}

std::shared_ptr<torch::optim::Optimizer> make_optimizer(std::vector<torch::optim::OptimizerParamGroup> groups,
                                                        const OptimizerOptions& options, double lr) {
  return with_kind(options, lr, [&](auto* kind, const auto& defaults) -> std::shared_ptr<torch::optim::Optimizer> {
    using Optim = std::remove_pointer_t<decltype(kind)>;
    return compat::optimizer_over<Optim>(std::move(groups), defaults);
  });
}

std::shared_ptr<torch::optim::Optimizer> make_optimizer(const torch::nn::Module& model,
                                                        const OptimizerOptions& options, double lr) {
  return make_optimizer(optimizer_param_groups(model, options, lr), options, lr);
}

}  // namespace dpt::optim
