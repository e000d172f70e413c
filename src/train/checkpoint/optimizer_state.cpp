#include "dptrain/train/checkpoint/optimizer_state.h"

#include <memory>
#include <optional>
#include <string>

#include <c10/util/Type.h>
#include <torch/optim/adamw.h>
#include <torch/optim/rmsprop.h>
#include <torch/optim/sgd.h>

#include "dptrain/common/error.h"
#include "dptrain/compat/pickle.h"
#include "dptrain/compat/compat.h"
#include "dptrain/train/checkpoint/sharded_optimizer_state.h"

namespace dpt::train {

namespace {

using Dict = c10::impl::GenericDict;
using StateMap = std::remove_reference_t<decltype(std::declval<torch::optim::SGD&>().state())>;

c10::IValue entry(const Dict& dict, const std::string& key, const std::string& where) {
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

double group_number(const Dict& group, const std::string& key) {
  return number(entry(group, key, "a parameter group"), key);
}

// A step count as Python keeps it: an int (SGD's and RMSprop's in 1.x) or a one-element tensor
// (AdamW's; every kind's in 2.x).
int64_t step_count(const Dict& state) {
  const auto value = entry(state, "step", "a parameter's state");
  if (value.isTensor()) return static_cast<int64_t>(value.toTensor().item<double>());
  return static_cast<int64_t>(number(value, "step"));
}

// A saved tensor of a parameter's state, checked against the parameter and moved onto it.
at::Tensor buffer_for(const Dict& state, const std::string& key, const at::Tensor& param) {
  const auto buffer = entry(state, key, "a parameter's state").toTensor();
  DPT_CHECK(buffer.sizes() == param.sizes(), CheckpointError, "optimizer state: '", key, "' has shape ",
            buffer.sizes(), ", its parameter ", param.sizes());
  return buffer.to(param.device(), param.scalar_type()).clone();
}

// A tensor of a parameter's state as Python keeps it, on the CPU; nothing when the optimizer has
// none (no momentum, not centered, no amsgrad).
void put(Dict& state, const char* key, const at::Tensor& tensor) {
  if (tensor.defined()) state.insert(key, tensor.detach().cpu());
}

std::optional<at::Tensor> optional_buffer_for(const Dict& state, const std::string& key, const at::Tensor& param) {
  if (state.find(key) == state.end()) return std::nullopt;
  return buffer_for(state, key, param);
}

// One torch.optim class's entries, both ways: the hyper-parameters of a group (besides params)
// and a parameter's state. `marker` is a group key only this class has, to tell a checkpoint of
// another optimizer from a damaged one.
struct SgdFormat {
  using Options = torch::optim::SGDOptions;
  using ParamState = torch::optim::SGDParamState;
  static constexpr const char* python_class = "SGD";
  static constexpr const char* marker = "dampening";
  static void write_group(const Options& o, Dict& g) {
    g.insert("momentum", o.momentum());
    g.insert("dampening", o.dampening());
    g.insert("nesterov", o.nesterov());
  }
  static void read_group(const Dict& g, Options& o) {
    o.momentum(group_number(g, "momentum")).dampening(group_number(g, "dampening"));
    o.nesterov(entry(g, "nesterov", "a parameter group").toBool());
  }
  static std::optional<Dict> write_state(const ParamState& s) {
    if (!s.momentum_buffer().defined()) return std::nullopt;
    Dict d = compat::string_dict();
    put(d, "momentum_buffer", s.momentum_buffer());
    return d;
  }
  static std::unique_ptr<ParamState> read_state(const Dict& d, const at::Tensor& param) {
    auto s = std::make_unique<ParamState>();
    s->momentum_buffer(buffer_for(d, "momentum_buffer", param));
    return s;
  }
};

struct RmsPropFormat {
  using Options = torch::optim::RMSpropOptions;
  using ParamState = torch::optim::RMSpropParamState;
  static constexpr const char* python_class = "RMSprop";
  static constexpr const char* marker = "alpha";
  static void write_group(const Options& o, Dict& g) {
    g.insert("momentum", o.momentum());
    g.insert("alpha", o.alpha());
    g.insert("eps", o.eps());
    g.insert("centered", o.centered());
  }
  static void read_group(const Dict& g, Options& o) {
    o.momentum(group_number(g, "momentum")).alpha(group_number(g, "alpha")).eps(group_number(g, "eps"));
    o.centered(entry(g, "centered", "a parameter group").toBool());
  }
  static std::optional<Dict> write_state(const ParamState& s) {
    Dict d = compat::string_dict();
    d.insert("step", s.step());
    put(d, "square_avg", s.square_avg());
    put(d, "momentum_buffer", s.momentum_buffer());
    put(d, "grad_avg", s.grad_avg());
    return d;
  }
  static std::unique_ptr<ParamState> read_state(const Dict& d, const at::Tensor& param) {
    auto s = std::make_unique<ParamState>();
    s->step(step_count(d)).square_avg(buffer_for(d, "square_avg", param));
    if (auto buffer = optional_buffer_for(d, "momentum_buffer", param)) s->momentum_buffer(*buffer);
    if (auto buffer = optional_buffer_for(d, "grad_avg", param)) s->grad_avg(*buffer);
    return s;
  }
};

struct AdamWFormat {
  using Options = torch::optim::AdamWOptions;
  using ParamState = torch::optim::AdamWParamState;
  static constexpr const char* python_class = "AdamW";
  static constexpr const char* marker = "betas";
  static void write_group(const Options& o, Dict& g) {
    g.insert("betas", c10::List<double>({std::get<0>(o.betas()), std::get<1>(o.betas())}));
    g.insert("eps", o.eps());
    g.insert("amsgrad", o.amsgrad());
  }
  static void read_group(const Dict& g, Options& o) {
    const auto betas = entry(g, "betas", "a parameter group");
    DPT_CHECK(betas.isList() || betas.isTuple(), CheckpointError, "optimizer state: 'betas' is a ",
              betas.tagKind(), ", expected two numbers");
    const auto values = betas.isList() ? betas.toListRef().vec() : betas.toTupleRef().elements().vec();
    DPT_CHECK(values.size() == 2, CheckpointError, "optimizer state: 'betas' has ", values.size(),
              " entries, expected 2");
    o.betas(std::make_tuple(number(values[0], "betas"), number(values[1], "betas")));
    o.eps(group_number(g, "eps")).amsgrad(entry(g, "amsgrad", "a parameter group").toBool());
  }
  static std::optional<Dict> write_state(const ParamState& s) {
    Dict d = compat::string_dict();
    // A float tensor, as Python's AdamW keeps it (a plain number there would be converted anyway).
    d.insert("step", at::scalar_tensor(static_cast<double>(s.step()), at::kFloat));
    put(d, "exp_avg", s.exp_avg());
    put(d, "exp_avg_sq", s.exp_avg_sq());
    put(d, "max_exp_avg_sq", s.max_exp_avg_sq());
    return d;
  }
  static std::unique_ptr<ParamState> read_state(const Dict& d, const at::Tensor& param) {
    auto s = std::make_unique<ParamState>();
    s->step(step_count(d)).exp_avg(buffer_for(d, "exp_avg", param)).exp_avg_sq(buffer_for(d, "exp_avg_sq", param));
    if (auto buffer = optional_buffer_for(d, "max_exp_avg_sq", param)) s->max_exp_avg_sq(*buffer);
    return s;
  }
};

template <typename F>
Dict state_dict_of(const torch::optim::Optimizer& optimizer) {
  Dict state(c10::IntType::get(), c10::AnyType::get());
  c10::List<c10::IValue> groups(c10::AnyType::get());
  int64_t index = 0;
  for (const auto& group : optimizer.param_groups()) {
    c10::List<int64_t> params;
    for (const auto& param : group.params()) {
      auto found = optimizer.state().find(compat::optimizer_state_key<StateMap>(param));
      if (found != optimizer.state().end()) {
        const auto& param_state = static_cast<const typename F::ParamState&>(*found->second);
        if (auto saved = F::write_state(param_state)) state.insert(index, *saved);
      }
      params.push_back(index++);
    }
    const auto& options = static_cast<const typename F::Options&>(group.options());
    Dict g = compat::string_dict();
    g.insert("lr", options.lr());
    g.insert("weight_decay", options.weight_decay());
    F::write_group(options, g);
    g.insert("maximize", false);
    g.insert("params", params);
    groups.push_back(g);
  }
  Dict out = compat::string_dict();
  out.insert("state", state);
  out.insert("param_groups", groups);
  return out;
}

// Which torch.optim class wrote `group`, from the key only it has.
std::string writer_of(const Dict& group) {
  for (const auto& [marker, name] : {std::pair{SgdFormat::marker, SgdFormat::python_class},
                                     {RmsPropFormat::marker, RmsPropFormat::python_class},
                                     {AdamWFormat::marker, AdamWFormat::python_class}}) {
    if (group.find(marker) != group.end()) return name;
  }
  return "an unknown optimizer";
}

template <typename F>
void load_into(torch::optim::Optimizer& optimizer, const Dict& saved) {
  const auto groups = entry(saved, "param_groups", "the top level").toList();
  const auto state = entry(saved, "state", "the top level").toGenericDict();
  auto& own_groups = optimizer.param_groups();
  DPT_CHECK(groups.size() == own_groups.size(), CheckpointError, "optimizer state has ", groups.size(),
            " parameter groups, the optimizer ", own_groups.size(),
            "; resume with the weight-decay flags the checkpoint was written with (--norm-weight-decay, "
            "--bias-weight-decay)");
  int64_t index = 0;
  for (size_t g = 0; g < own_groups.size(); ++g) {
    const auto group = groups.get(g).toGenericDict();
    DPT_CHECK(group.find(F::marker) != group.end(), CheckpointError, "optimizer state is ", writer_of(group),
              "'s, this run's optimizer is ", F::python_class,
              "; resume with the --opt the checkpoint was written with");
    const auto params = entry(group, "params", "a parameter group").toList();
    auto& own = own_groups[g];
    DPT_CHECK(params.size() == own.params().size(), CheckpointError, "optimizer state: parameter group ", g, " has ",
              params.size(), " parameters, the model ", own.params().size(),
              "; the checkpoint is for a different model or other weight-decay flags");
    auto& options = static_cast<typename F::Options&>(own.options());
    options.lr(group_number(group, "lr"));
    options.weight_decay(group_number(group, "weight_decay"));
    F::read_group(group, options);
    for (const auto& param : own.params()) {
      auto found = state.find(index++);
      if (found == state.end()) continue;
      optimizer.state()[compat::optimizer_state_key<StateMap>(param)] =
          F::read_state(found->value().toGenericDict(), param);
    }
  }
}

}  // namespace

Dict optimizer_state_dict(const torch::optim::Optimizer& optimizer) {
  DPT_CHECK(!dynamic_cast<const ShardedOptimizer*>(&optimizer), Error,
            "optimizer_state_dict: a ZeRO optimizer's state is spread over its ranks; "
            "consolidated_optimizer_state_dict gathers it (collective)");
  if (dynamic_cast<const torch::optim::SGD*>(&optimizer)) {
    return state_dict_of<SgdFormat>(optimizer);
  }
  if (dynamic_cast<const torch::optim::RMSprop*>(&optimizer)) {
    return state_dict_of<RmsPropFormat>(optimizer);
  }
  if (dynamic_cast<const torch::optim::AdamW*>(&optimizer)) {
    return state_dict_of<AdamWFormat>(optimizer);
  }
  throw Error(str("optimizer_state_dict: no Python layout for ", c10::demangle(typeid(optimizer).name()),
                  "; SGD, RMSprop and AdamW have one"));
}

void load_optimizer_state_dict(torch::optim::Optimizer& optimizer, const Dict& saved) {
  if (auto* sharded = dynamic_cast<ShardedOptimizer*>(&optimizer)) {
    return load_sharded_optimizer_state_dict(*sharded, saved);
  }
  if (dynamic_cast<torch::optim::SGD*>(&optimizer)) {
    return load_into<SgdFormat>(optimizer, saved);
  }
  if (dynamic_cast<torch::optim::RMSprop*>(&optimizer)) {
    return load_into<RmsPropFormat>(optimizer, saved);
  }
  if (dynamic_cast<torch::optim::AdamW*>(&optimizer)) {
    return load_into<AdamWFormat>(optimizer, saved);
  }
  throw Error(str("load_optimizer_state_dict: no Python layout for ", c10::demangle(typeid(optimizer).name()),
                  "; SGD, RMSprop and AdamW have one"));
}

}  // namespace dpt::train
