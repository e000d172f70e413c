#include "dptrain/models/torchscript.h"

#include <utility>

#include "dptrain/common/error.h"

namespace dpt::models {
namespace {

// Mirrors `script` into `owner`: its own tensors directly, its submodules as ScriptMirrors.
void mirror_into(torch::nn::Module& owner, const torch::jit::Module& script);

// One level of the scripted hierarchy: the same parameter and buffer tensors under the same
// names, and a mirror per submodule. Not Cloneable: a clone of the network reloads the file, and
// copying values into it is all a mirror has to do (clone_ below).
class ScriptMirror : public torch::nn::Module {
 public:
  explicit ScriptMirror(const torch::jit::Module& script) : torch::nn::Module("ScriptModule") {
    mirror_into(*this, script);
  }

  // `other` mirrors another load of the same file: take over its values, recursively.
  void take_values(torch::nn::Module& other, const c10::optional<torch::Device>& device) {
    torch::NoGradGuard no_grad;
    auto copy = [&](torch::Tensor& mine, const torch::Tensor& theirs) {
      mine.set_data(device && theirs.device() != *device ? theirs.to(*device) : theirs.clone());
    };
    auto their_params = other.named_parameters(/*recurse=*/false);
    for (auto& param : named_parameters(/*recurse=*/false)) copy(param.value(), their_params[param.key()]);
    auto their_buffers = other.named_buffers(/*recurse=*/false);
    for (auto& buffer : named_buffers(/*recurse=*/false)) copy(buffer.value(), their_buffers[buffer.key()]);
    auto their_children = other.named_children();
    for (auto& child : named_children()) {
      static_cast<ScriptMirror&>(*child.value()).take_values(*their_children[child.key()], device);
    }
  }

 private:
  // What Cloneable calls on the children of a network being cloned.
  void clone_(torch::nn::Module& other, const c10::optional<torch::Device>& device) override {
    take_values(other, device);
  }
};

void mirror_into(torch::nn::Module& owner, const torch::jit::Module& script) {
  for (const auto& param : script.named_parameters(/*recurse=*/false)) {
    owner.register_parameter(param.name, param.value, param.value.requires_grad());
  }
  for (const auto& buffer : script.named_buffers(/*recurse=*/false)) owner.register_buffer(buffer.name, buffer.value);
  for (const auto& child : script.named_children()) {
    owner.register_module(child.name, std::make_shared<ScriptMirror>(child.value));
  }
}

}  // namespace

ScriptedNetworkImpl::ScriptedNetworkImpl(std::string path) : path_(std::move(path)) { reset(); }

void ScriptedNetworkImpl::reset() {
  try {
    script_ = torch::jit::load(path_);
  } catch (const c10::Error& error) {
    throw ConfigError(str("cannot load the TorchScript model '", path_, "': ", error.what_without_backtrace(),
                          "; save it from Python with torch.jit.script(model).save(path) (or torch.jit.trace)"));
  }
  mirror_into(*this, script_);
  script_.train(is_training());
}

torch::Tensor ScriptedNetworkImpl::forward(const torch::Tensor& images) {
  auto output = script_.forward({images});
  DPT_CHECK(output.isTensor(), ConfigError, "the TorchScript model '", path_, "' returns ", output.tagKind(),
            ", not a tensor of logits; script a module whose forward returns the logits");
  return output.toTensor();
}

void ScriptedNetworkImpl::train(bool on) {
  torch::nn::Module::train(on);
  script_.train(on);
}

void ScriptedNetworkImpl::pretty_print(std::ostream& stream) const { stream << "ScriptedNetwork(" << path_ << ")"; }

}  // namespace dpt::models
