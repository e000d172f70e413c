#pragma once
// GoogLeNet (Szegedy et al. 2014) and Inception v3 (Szegedy et al. 2015) as torchvision builds
// them, auxiliary classifiers included: in training, the heads' logits go to
// take_auxiliary_logits() and the trainer adds their losses (0.3 each for GoogLeNet's two, 0.4
// for Inception v3's one, as the papers' recipes); in eval mode the heads are skipped.
//
//   auto net = dpt::models::googlenet(dpt::models::ClassifierOptions().num_classes(10));
//   auto logits = net(images);                            // main logits only
//   auto aux = net->take_auxiliary_logits();              // aux1 (after 4a) and aux2 (after 4d)
//
// torchvision's pretrained GoogLeNet and Inception v3 weights expect its transform_input (inputs
// renormalised to [-1, 1]); these networks are built as torchvision builds them without weights,
// which has it off.

#include <string>
#include <vector>

#include <torch/nn/cloneable.h>
#include <torch/nn/modules/container/any.h>
#include <torch/nn/pimpl.h>

#include "dptrain/models/classifier.h"
#include "dptrain/models/layers.h"
#include "dptrain/models/state_dict.h"

namespace dpt::models {

// One named child of an InceptionNetwork, in the order torchvision registers it.
struct InceptionPart {
  std::string name;
  torch::nn::AnyModule module;
  // Empty: a stage of the trunk, run in order. Otherwise an auxiliary head reading the output of
  // the trunk stage of this name.
  std::string head_after;
  double loss_weight = 0;  // a head's
};

// A trunk of named stages (the last ones pool, drop out and classify) with auxiliary heads
// tapping some of them; GoogLeNet and Inception v3 are one of these.
class InceptionNetworkImpl : public torch::nn::Cloneable<InceptionNetworkImpl>, public AuxiliaryHeads {
 public:
  InceptionNetworkImpl(std::string family, std::function<std::vector<InceptionPart>()> build);
  void reset() override;
  torch::Tensor forward(const torch::Tensor& images);
  std::vector<AuxiliaryLogits> take_auxiliary_logits() override;
  void pretty_print(std::ostream& stream) const override { stream << family_; }

 private:
  std::string family_;
  std::function<std::vector<InceptionPart>()> build_;
  std::vector<InceptionPart> parts_;
  std::vector<AuxiliaryLogits> auxiliary_;  // from the last training forward
};
TORCH_MODULE(InceptionNetwork);

// torchvision's weights for these carry the heads, and its builders drop them from the weights of
// a network built without heads: this does the same, erasing the entries under aux1., aux2. and
// AuxLogits. (none of them in another family's weights).
void drop_auxiliary_heads(StateDict& weights);

// options.aux_logits() builds the heads; options.dropout() sets the main dropout (torchvision's
// 0.2 and 0.5), and 0 also turns the heads' dropout (GoogLeNet's 0.7) off.
InceptionNetwork googlenet(const ClassifierOptions& options);
InceptionNetwork inception_v3(const ClassifierOptions& options);

}  // namespace dpt::models
