#include "dptrain/models/classifier.h"

#include <ostream>
#include <utility>

#include "dptrain/common/error.h"

namespace dpt::models {

ClassifierImpl::ClassifierImpl(std::string arch, NetworkBuilder builder, ClassifierOptions options_)
    : options(std::move(options_)), arch_(std::move(arch)), builder_(std::move(builder)) {
  reset();
}

void ClassifierImpl::reset() {
  DPT_CHECK(options.num_classes() > 0, ConfigError, arch_, ": num_classes must be positive, got ",
            options.num_classes());
  network_ = builder_(options);
  auto& network = *network_.ptr();
  // The same tensors and modules, registered a second time under this module, so that every
  // traversal (parameters, state dict, to(), convert_sync_batchnorm) sees the network's names.
  for (const auto& child : network.named_children()) register_module(child.key(), child.value());
  for (const auto& param : network.named_parameters(/*recurse=*/false)) {
    register_parameter(param.key(), param.value(), param.value().requires_grad());
  }
  for (const auto& buffer : network.named_buffers(/*recurse=*/false)) register_buffer(buffer.key(), buffer.value());
  network.train(is_training());
}

torch::Tensor ClassifierImpl::forward(const torch::Tensor& images) {
  return network_.forward<torch::Tensor>(images);
}

std::vector<AuxiliaryLogits> ClassifierImpl::take_auxiliary_logits() {
  auto* heads = dynamic_cast<AuxiliaryHeads*>(network_.ptr().get());
  return heads ? heads->take_auxiliary_logits() : std::vector<AuxiliaryLogits>{};
}

bool ClassifierImpl::has_auxiliary_heads() const {
  return options.aux_logits() && dynamic_cast<AuxiliaryHeads*>(network_.ptr().get()) != nullptr;
}

void ClassifierImpl::train(bool on) {
  torch::nn::Module::train(on);
  network_.ptr()->train(on);
}

void ClassifierImpl::replace_norm_layer(const std::string& name, torch::nn::AnyModule layer, NormLayer factory) {
  auto* holder = dynamic_cast<NormLayerHolder*>(network_.ptr().get());
  DPT_CHECK(holder != nullptr, ConfigError, arch_, " holds the norm layer '", name,
            "' directly and cannot swap it; build it with a norm-layer factory instead");
  holder->replace_norm_layer(name, layer, factory);
  replace_module(name, layer.ptr());
  options.norm_layer(std::move(factory));
}

void ClassifierImpl::pretty_print(std::ostream& stream) const {
  stream << "dpt::models::Classifier(" << arch_ << ")";
}

}  // namespace dpt::models
