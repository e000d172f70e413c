#include "dptrain/optim/model_ema.h"

#include <algorithm>
#include <string>
#include <vector>

#include <torch/nn/module.h>

#include "dptrain/common/error.h"

namespace dpt::optim {

namespace {

constexpr const char* kModulePrefix = "module.";

// AveragedModel's use_buffers order: every parameter, then every buffer.
std::vector<at::Tensor> averaged_tensors(const torch::nn::Module& module) {
  std::vector<at::Tensor> tensors = module.parameters();
  for (const auto& buffer : module.buffers()) tensors.push_back(buffer);
  return tensors;
}

}  // namespace

double ema_decay(const ModelEmaOptions& options, int64_t global_batch, int64_t epochs) {
  DPT_CHECK(options.steps() > 0, ConfigError, "--model-ema-steps must be positive, got ", options.steps());
  DPT_CHECK(options.decay() >= 0 && options.decay() <= 1, ConfigError, "--model-ema-decay must lie in [0, 1], got ",
            options.decay());
  DPT_CHECK(epochs > 0, ConfigError, "model EMA needs a positive number of epochs, got ", epochs);
  const double adjust = static_cast<double>(global_batch * options.steps()) / static_cast<double>(epochs);
  return 1.0 - std::min(1.0, (1.0 - options.decay()) * adjust);
}

ModelEma::ModelEma(const models::Classifier& model, double decay) : module_(nullptr), decay_(decay) {
  try {
    module_ = models::Classifier(std::dynamic_pointer_cast<models::ClassifierImpl>(model->clone()));
  } catch (const c10::Error& e) {
    throw ConfigError(
        str("--model-ema needs a copy of the model, which this one cannot make: ", e.what_without_backtrace()));
  }
  for (auto& param : module_->parameters()) param.requires_grad_(false);
  module_->eval();
}

void ModelEma::update(const torch::nn::Module& model) {
  torch::NoGradGuard no_grad;
  const std::vector<at::Tensor> averages = averaged_tensors(*module_), current = averaged_tensors(model);
  DPT_ASSERT(averages.size() == current.size(), "model EMA: ", averages.size(), " averaged tensors, the model has ",
             current.size());
  for (size_t i = 0; i < averages.size(); ++i) {
    const at::Tensor value = current[i].detach().to(averages[i].device());
    if (n_averaged_ == 0) {
      averages[i].copy_(value);
    } else {
      // torchvision's ema_avg, in its order of operations: decay * average + (1 - decay) * model.
      averages[i].copy_(averages[i] * decay_ + value * (1.0 - decay_));
    }
  }
  ++n_averaged_;
}

models::StateDict ModelEma::state_dict() const {
  models::StateDict out;
  out.insert("n_averaged", at::scalar_tensor(n_averaged_, at::kLong));
  for (const auto& entry : models::state_dict(*module_)) out.insert(kModulePrefix + entry.key(), entry.value());
  return out;
}

void ModelEma::load_state_dict(const models::StateDict& state) {
  DPT_CHECK(state.contains("n_averaged"), CheckpointError,
            "model EMA state has no 'n_averaged'; it was not written by dptrain or Python's AveragedModel");
  models::StateDict weights;
  for (const auto& entry : state) {
    if (entry.key() == "n_averaged") continue;
    DPT_CHECK(entry.key().rfind(kModulePrefix, 0) == 0, CheckpointError, "model EMA state entry '", entry.key(),
              "' does not start with 'module.'");
    weights.insert(entry.key().substr(std::string(kModulePrefix).size()), entry.value());
  }
  models::load_state_dict(*module_, weights);
  n_averaged_ = state["n_averaged"].item<int64_t>();
}

}  // namespace dpt::optim
