#pragma once
// One module type for every image classifier, whatever its family, so that the parallel front
// ends, the trainer and checkpoints handle a VGG, a ViT or a scripted model from Python alike.
//
//   auto model = dpt::models::create("mobilenet_v2", dpt::models::ClassifierOptions().num_classes(100));
//   auto logits = model(images);                             // [N, 3, H, W] -> [N, 100]
//   dpt::DistributedDataParallel<dpt::models::Classifier> ddp(model, comm);
//   auto* net = model->network().as<dpt::models::MobileNetV2>();   // the family's own module
//
// A Classifier is transparent: it registers the network's children, parameters and buffers as
// its own, so the state dict carries the family's names (features.0.0.weight, not
// network.features...), which torchvision's load_state_dict expects. clone() rebuilds the
// network with its builder and copies the values, so DataParallel's replicas work for every
// family. Networks with auxiliary heads (GoogLeNet, Inception v3) return the main logits from
// forward and hand the heads' logits to take_auxiliary_logits().

#include <cstdint>
#include <functional>
#include <optional>
#include <string>
#include <vector>

#include <torch/arg.h>
#include <torch/nn/cloneable.h>
#include <torch/nn/modules/container/any.h>
#include <torch/nn/pimpl.h>

#include "dptrain/models/layers.h"
#include "dptrain/models/norm_layer_holder.h"

namespace dpt::models {

// What every family's builder takes. Unset optionals mean the family's own default (torchvision's).
struct ClassifierOptions {
  // Outputs of the final classification layer.
  TORCH_ARG(int64_t, num_classes) = 1000;
  // Factory for the batch-norm layers of the families that take one (torchvision's norm_layer);
  // empty means BatchNorm2d.
  TORCH_ARG(NormLayer, norm_layer) = nullptr;
  // Probability of the classifier's dropout (torchvision's `dropout`, e.g. 0.5 for VGG, 0.2 for
  // MobileNetV2); 0 turns every dropout of the network off.
  TORCH_ARG(std::optional<double>, dropout) = std::nullopt;
  // Stochastic depth's final drop probability (EfficientNet, ConvNeXt); 0 turns it off.
  TORCH_ARG(std::optional<double>, stochastic_depth) = std::nullopt;
  // Input side the network is built for, where it matters to the weights (ViT's position
  // embedding); unset: the family's ImageNet size.
  TORCH_ARG(std::optional<int64_t>, image_size) = std::nullopt;
  // Build the auxiliary classifiers of GoogLeNet and Inception v3 (used in training only).
  TORCH_ARG(bool, aux_logits) = true;
  // Start residual branches at zero (ResNets' zero_init_residual).
  TORCH_ARG(bool, zero_init_residual) = false;
};

// The dropout probability `options` asks for, else the family's default.
inline double dropout_or(const ClassifierOptions& options, double family_default) {
  return options.dropout().value_or(family_default);
}

// An auxiliary head's logits from the last training forward, with the weight its loss takes in
// the total (torchvision's recipes: 0.3 for each of GoogLeNet's, 0.4 for Inception v3's).
struct AuxiliaryLogits {
  torch::Tensor logits;
  double loss_weight = 0;
};

// Implemented by networks with auxiliary heads.
class AuxiliaryHeads {
 public:
  virtual ~AuxiliaryHeads() = default;
  // The heads' logits of the last training forward, once (later calls return none until the next
  // training forward); none in eval mode or when the heads were not built.
  virtual std::vector<AuxiliaryLogits> take_auxiliary_logits() = 0;
};

// Builds a family's network for `options`; the module's forward maps images to logits.
using NetworkBuilder = std::function<torch::nn::AnyModule(const ClassifierOptions&)>;

class ClassifierImpl : public torch::nn::Cloneable<ClassifierImpl>, public NormLayerHolder {
 public:
  ClassifierImpl(std::string arch, NetworkBuilder builder, ClassifierOptions options);
  // (Re)builds the network and adopts its children, parameters and buffers.
  void reset() override;
  torch::Tensor forward(const torch::Tensor& images);
  std::vector<AuxiliaryLogits> take_auxiliary_logits();
  // Whether training forwards produce auxiliary logits (a family with heads, built with them).
  bool has_auxiliary_heads() const;
  // The network's own train() too: it is not a child (see above), and families whose forward
  // asks is_training() (auxiliary heads) read their own flag.
  void train(bool on = true) override;
  // Swaps a norm layer the network holds directly (ResNet's bn1), through the network's own
  // NormLayerHolder, and keeps `factory` for rebuilding.
  void replace_norm_layer(const std::string& name, torch::nn::AnyModule layer, NormLayer factory) override;
  void pretty_print(std::ostream& stream) const override;

  // The family's module (ResNetImpl, VGGImpl, ...).
  torch::nn::Module& network() const { return *network_.ptr(); }

  ClassifierOptions options;

 private:
  std::string arch_;
  NetworkBuilder builder_;
  torch::nn::AnyModule network_;
};
TORCH_MODULE(Classifier);

}  // namespace dpt::models
