#pragma once
// A module saved from Python with torch.jit.script or torch.jit.trace, as a network dptrain
// trains like its own (`dptrain train -a torchscript:net.pt`): its parameters and buffers keep
// their Python names (the scripted module's hierarchy is mirrored by plain modules holding the
// same tensors), so checkpoints load back into the Python model with load_state_dict.
//
//   # Python: torch.jit.script(torchvision.models.resnet18(num_classes=10)).save("net.pt")
//   dpt::models::ScriptedNetwork net("net.pt");
//   auto logits = net(images);

#include <ostream>
#include <string>

#include <torch/nn/cloneable.h>
#include <torch/nn/pimpl.h>
#include <torch/script.h>

namespace dpt::models {

class ScriptedNetworkImpl : public torch::nn::Cloneable<ScriptedNetworkImpl> {
 public:
  // Throws ConfigError when `path` cannot be read as a TorchScript module.
  explicit ScriptedNetworkImpl(std::string path);
  // Loads the file again: a clone gets its own tensors (and then the original's values).
  void reset() override;
  torch::Tensor forward(const torch::Tensor& images);
  // The scripted module's `training` flags too: its dropout and batch norm read those.
  void train(bool on = true) override;
  void pretty_print(std::ostream& stream) const override;

 private:
  std::string path_;
  torch::jit::Module script_;
};
TORCH_MODULE(ScriptedNetwork);

}  // namespace dpt::models
