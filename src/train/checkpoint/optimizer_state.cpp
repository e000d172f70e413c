#include "dptrain/train/checkpoint/optimizer_state.h"

#include <memory>
#include <string>

#include "dptrain/common/error.h"
#include "dptrain/compat/compat.h"

namespace dpt::train {

namespace {

using StateMap = std::remove_reference_t<decltype(std::declval<torch::optim::SGD&>().state())>;

c10::IValue entry(const c10::impl::GenericDict& dict, const std::string& key, const std::string& where) {
  auto found = dict.find(key);
  DPT_CHECK(found != dict.end(), CheckpointError, "optimizer state has no '", key, "' in ", where,
            "; the checkpoint was not written by dptrain or Python's optimizer.state_dict()");
  return found->value();
}

double number(const c10::IValue& value, const std::string& key) {
  DPT_CHECK(value.isDouble() || value.isInt(), CheckpointError, "optimizer state: '", key, "' is a ",
            value.tagKind(), ", expected a number");
  return value.isDouble() ? value.toDouble() : static_cast<double>(value.toInt());
}

}  // namespace

c10::impl::GenericDict sgd_state_dict(const torch::optim::SGD& optimizer) {
  c10::impl::GenericDict state(c10::IntType::get(), c10::AnyType::get());
  c10::List<c10::IValue> groups(c10::AnyType::get());
  int64_t index = 0;
  for (const auto& group : optimizer.param_groups()) {
    const auto& options = static_cast<const torch::optim::SGDOptions&>(group.options());
    c10::List<int64_t> params;
    for (const auto& param : group.params()) {
      auto found = optimizer.state().find(compat::optimizer_state_key<StateMap>(param));
      if (found != optimizer.state().end()) {
        const auto& buffer = static_cast<const torch::optim::SGDParamState&>(*found->second).momentum_buffer();
        if (buffer.defined()) {
          c10::impl::GenericDict per_param(c10::StringType::get(), c10::AnyType::get());
          per_param.insert("momentum_buffer", buffer.detach().cpu());
          state.insert(index, per_param);
        }
      }
      params.push_back(index++);
    }
    c10::impl::GenericDict g(c10::StringType::get(), c10::AnyType::get());
    g.insert("lr", options.lr());
    g.insert("momentum", options.momentum());
    g.insert("dampening", options.dampening());
    g.insert("weight_decay", options.weight_decay());
    g.insert("nesterov", options.nesterov());
    g.insert("maximize", false);
    g.insert("params", params);
    groups.push_back(g);
  }
  c10::impl::GenericDict out(c10::StringType::get(), c10::AnyType::get());
  out.insert("state", state);
  out.insert("param_groups", groups);
  return out;
}

void load_sgd_state_dict(torch::optim::SGD& optimizer, const c10::impl::GenericDict& saved) {
  const auto groups = entry(saved, "param_groups", "the top level").toList();
  const auto state = entry(saved, "state", "the top level").toGenericDict();
  auto& own_groups = optimizer.param_groups();
  DPT_CHECK(groups.size() == own_groups.size(), CheckpointError, "optimizer state has ", groups.size(),
            " parameter groups, the optimizer ", own_groups.size());
  int64_t index = 0;
  for (size_t g = 0; g < own_groups.size(); ++g) {
    const auto group = groups.get(g).toGenericDict();
    const auto params = entry(group, "params", "a parameter group").toList();
    auto& own = own_groups[g];
    DPT_CHECK(params.size() == own.params().size(), CheckpointError, "optimizer state: parameter group ", g, " has ",
              params.size(), " parameters, the model ", own.params().size(),
              "; the checkpoint is for a different model");
    auto& options = static_cast<torch::optim::SGDOptions&>(own.options());
    options.lr(number(entry(group, "lr", "a parameter group"), "lr"));
    options.momentum(number(entry(group, "momentum", "a parameter group"), "momentum"));
    options.dampening(number(entry(group, "dampening", "a parameter group"), "dampening"));
    options.weight_decay(number(entry(group, "weight_decay", "a parameter group"), "weight_decay"));
    options.nesterov(entry(group, "nesterov", "a parameter group").toBool());
    for (const auto& param : own.params()) {
      auto found = state.find(index++);
      if (found == state.end()) continue;
      const auto buffer = entry(found->value().toGenericDict(), "momentum_buffer", "a parameter's state").toTensor();
      DPT_CHECK(buffer.sizes() == param.sizes(), CheckpointError, "optimizer state: momentum buffer ", index - 1,
                " has shape ", buffer.sizes(), ", its parameter ", param.sizes());
      auto param_state = std::make_unique<torch::optim::SGDParamState>();
      param_state->momentum_buffer(buffer.to(param.device(), param.scalar_type()).clone());
      optimizer.state()[compat::optimizer_state_key<StateMap>(param)] = std::move(param_state);
    }
  }
}

}  // namespace dpt::train
