#pragma once
// State dicts as PyTorch has them: parameters and buffers by dotted name, in the order
// `torch.nn.Module.state_dict()` gives, and files that Python's torch.save/torch.load share.
//
//   auto model = dpt::models::resnet18();
//   dpt::models::write_state_dict(dpt::models::state_dict(*model), "resnet18.pt");
//   // Python: m = torchvision.models.resnet18(); m.load_state_dict(torch.load("resnet18.pt"))
//   // Python: torch.save(dict(m.state_dict()), "from_python.pt")
//   dpt::models::load_state_dict(*model, dpt::models::read_state_dict("from_python.pt"));

#include <cstdint>
#include <string>
#include <vector>

#include <torch/nn/module.h>
#include <torch/ordered_dict.h>

namespace dpt::models {

using StateDict = torch::OrderedDict<std::string, torch::Tensor>;

// Every parameter and buffer of `module` and its children: for each module in pre-order, its own
// parameters, then its own buffers (PyTorch's order, e.g. bn1.weight, bn1.bias,
// bn1.running_mean, bn1.running_var, bn1.num_batches_tracked). The tensors are the module's own
// (shared storage, detached from autograd), not copies.
StateDict state_dict(const torch::nn::Module& module);

// Copies `values` into `module`'s parameters and buffers, as strict load_state_dict does: the key
// sets must match exactly and every shape must agree. Throws CheckpointError naming the first
// missing key, the first unexpected key, or the first shape mismatch (expected vs actual);
// nothing is copied unless everything fits. Values are converted to each target's dtype and
// device.
void load_state_dict(torch::nn::Module& module, const StateDict& values);

// Fine-tuning on another set of classes: where `weights` (of a model made for F classes) and
// `module` (made for `num_classes`, M) disagree only in the first dimension of entries that
// `module` sizes M and `weights` sizes F (the classifier's weight and bias, an auxiliary head's),
// those entries of `weights` become `module`'s own freshly initialised ones, as one replaces
// torchvision's `fc` before fine-tuning. Replaces none unless every disagreeing entry is such a
// one (load_state_dict then names the first that is not).
struct OwnClassifier {
  std::vector<std::string> keys;  // the entries replaced, in `module`'s order
  int64_t weights_classes = 0;    // F, when any was replaced
};
OwnClassifier keep_own_classifier(StateDict& weights, const torch::nn::Module& module, int64_t num_classes);

// Writes `values` as a plain dict of tensors in torch.save's zip format (torch.load reads it),
// atomically (dpt::write_file_atomically): a crash leaves the old file or the new one. Throws
// CheckpointError naming the file and the failing operation.
void write_state_dict(const StateDict& values, const std::string& path);

// Reads a dict of name -> tensor written by torch.save (e.g. `dict(model.state_dict())`) or by
// write_state_dict. Throws CheckpointError when the file is missing, unreadable or not such a dict.
// LibTorch 1.13's unpickler lacks the opcode Python uses for a dict of exactly one entry, so such
// a file fails to read there.
StateDict read_state_dict(const std::string& path);

}  // namespace dpt::models
