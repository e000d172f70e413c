#include "dptrain/models/state_dict.h"

#include <cerrno>
#include <cstring>
#include <filesystem>
#include <vector>

#include <ATen/core/Dict.h>
#include <torch/serialize.h>

#include "dptrain/common/atomic_file.h"
#include "dptrain/common/error.h"
#include "dptrain/common/read_file.h"
#include "dptrain/compat/pickle.h"

namespace dpt::models {
namespace {

void collect(const torch::nn::Module& module, const std::string& prefix, StateDict& out) {
  for (const auto& param : module.named_parameters(/*recurse=*/false)) {
    if (param.value().defined()) out.insert(prefix + param.key(), param.value().detach());
  }
  for (const auto& buffer : module.named_buffers(/*recurse=*/false)) {
    if (buffer.value().defined()) out.insert(prefix + buffer.key(), buffer.value().detach());
  }
  for (const auto& child : module.named_children()) {
    collect(*child.value(), prefix + child.key() + ".", out);
  }
}

// "2 missing keys (first: 'fc.bias')"
std::string describe(const std::vector<std::string>& keys, const char* what) {
  return str(keys.size(), " ", what, keys.size() == 1 ? " key" : " keys", " (first: '", keys.front(), "')");
}

std::string shape(const torch::Tensor& tensor) { return str(tensor.sizes()); }

// Python's state_dict() is an OrderedDict, which LibTorch's unpickler reads as None.
constexpr const char* kSaveFromPython =
    "from Python, save a plain dict of tensors: torch.save(dict(model.state_dict()), path)";

}  // namespace

StateDict state_dict(const torch::nn::Module& module) {
  StateDict out;
  collect(module, "", out);
  return out;
}

void load_state_dict(torch::nn::Module& module, const StateDict& values) {
  const StateDict targets = state_dict(module);
  std::vector<std::string> missing, unexpected;
  for (const auto& target : targets) {
    if (!values.contains(target.key())) missing.push_back(target.key());
  }
  for (const auto& value : values) {
    if (!targets.contains(value.key())) unexpected.push_back(value.key());
  }
  if (!missing.empty() || !unexpected.empty()) {
    std::string facts;
    if (!missing.empty()) facts = describe(missing, "missing");
    if (!unexpected.empty()) facts += (facts.empty() ? "" : ", ") + describe(unexpected, "unexpected");
    // The most common cause: a state dict saved from a data-parallel wrapper.
    const bool wrapped = !unexpected.empty() && unexpected.front().rfind("module.", 0) == 0;
    throw CheckpointError(str(
        "state dict does not match the ", module.name(), " model (", targets.size(),
        " entries expected, ", values.size(), " given): ", facts,
        wrapped ? "; the keys start with 'module.', as saved from a (Distributed)DataParallel "
                  "wrapper: save the wrapped module's state dict, or strip the prefix"
                : "; check the architecture and num_classes the state dict was saved with"));
  }
  for (const auto& target : targets) {
    const auto& value = values[target.key()];
    DPT_CHECK(value.defined(), CheckpointError, "state dict entry '", target.key(),
              "' is an undefined tensor; the model expects shape ", shape(target.value()));
    DPT_CHECK(value.sizes() == target.value().sizes(), CheckpointError, "state dict entry '",
              target.key(), "' has the wrong shape: the model expects ", shape(target.value()),
              ", the state dict has ", shape(value),
              "; check the architecture and num_classes the state dict was saved with");
  }
  torch::NoGradGuard no_grad;
  for (const auto& target : targets) target.value().copy_(values[target.key()]);
}

OwnClassifier keep_own_classifier(StateDict& weights, const torch::nn::Module& module, int64_t num_classes) {
  const StateDict own = state_dict(module);
  OwnClassifier classifier;
  for (const auto& entry : own) {
    const torch::Tensor* given = weights.find(entry.key());
    if (given == nullptr || !given->defined() || given->sizes() == entry.value().sizes()) continue;
    const auto mine = entry.value().sizes(), theirs = given->sizes();
    const bool classes_only = mine.size() == theirs.size() && !mine.empty() && mine[0] == num_classes &&
                              mine.slice(1) == theirs.slice(1) &&
                              (classifier.keys.empty() || theirs[0] == classifier.weights_classes);
    if (!classes_only) return {};
    classifier.weights_classes = theirs[0];
    classifier.keys.push_back(entry.key());
  }
  for (const auto& key : classifier.keys) weights[key] = own[key];
  return classifier;
}

void write_state_dict(const StateDict& values, const std::string& path) {
  c10::Dict<std::string, torch::Tensor> dict;
  for (const auto& entry : values) dict.insert(entry.key(), entry.value().detach().cpu());
  write_file_atomically(path, [&](const ByteWriter& write) { compat::pickle_save(dict, write); });
}

StateDict read_state_dict(const std::string& path) {
  const auto bytes = read_file<std::vector<char>>(path);
  DPT_CHECK(bytes, CheckpointError, "cannot open state dict file '", path, "': ", std::strerror(errno));
  c10::IValue loaded;
  try {
    loaded = compat::pickle_load(*bytes);
  } catch (const c10::Error& error) {
    throw CheckpointError(str("cannot read state dict file '", path, "' (", bytes->size(),
                              " bytes) with LibTorch's unpickler: ", error.what_without_backtrace(),
                              "; ", kSaveFromPython));
  }
  DPT_CHECK(loaded.isGenericDict(), CheckpointError, "state dict file '", path, "' holds a ",
            loaded.tagKind(), ", not a dict of name -> tensor; ", kSaveFromPython);
  StateDict out;
  for (const auto& entry : loaded.toGenericDict()) {
    DPT_CHECK(entry.key().isString() && entry.value().isTensor(), CheckpointError,
              "state dict file '", path, "' has an entry of types ", entry.key().tagKind(), " -> ",
              entry.value().tagKind(), "; expected string -> tensor");
    out.insert(entry.key().toStringRef(), entry.value().toTensor());
  }
  return out;
}

}  // namespace dpt::models
