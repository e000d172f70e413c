#include "dptrain/train/checkpoint/training_checkpoint.h"

#include "dptrain/common/error.h"
#include "dptrain/compat/pickle.h"
#include "dptrain/train/checkpoint/checkpoint_file.h"

namespace dpt::train {

namespace {

class Reader {
 public:
  Reader(const c10::IValue& value, const std::filesystem::path& file) : file_(file.string()) {
    DPT_CHECK(value.isGenericDict(), CheckpointError, "checkpoint ", file_, " holds a ", value.tagKind(),
              ", not a dict; it was not written by dptrain train");
    dict_ = value.toGenericDict();
  }
  c10::IValue get(const std::string& key, bool (c10::IValue::*is)() const, const char* type) const {
    auto found = dict_.find(key);
    DPT_CHECK(found != dict_.end(), CheckpointError, "checkpoint ", file_, " has no '", key,
              "' entry; it was not written by dptrain train (use --pretrained for weights alone)");
    DPT_CHECK((found->value().*is)(), CheckpointError, "checkpoint ", file_, ": '", key, "' is a ",
              found->value().tagKind(), ", expected ", type);
    return found->value();
  }
  int64_t integer(const std::string& key) const { return get(key, &c10::IValue::isInt, "an integer").toInt(); }
  bool has(const std::string& key) const { return dict_.contains(key); }
  // An entry newer dptrain versions write: `fallback` when absent.
  int64_t integer_or(const std::string& key, int64_t fallback) const {
    return has(key) ? integer(key) : fallback;
  }
  double number(const std::string& key) const {
    auto v = get(key, &c10::IValue::isScalar, "a number");
    return v.isDouble() ? v.toDouble() : static_cast<double>(v.toInt());
  }
  c10::impl::GenericDict dict(const std::string& key) const {
    return get(key, &c10::IValue::isGenericDict, "a dict").toGenericDict();
  }

 private:
  std::string file_;
  c10::impl::GenericDict dict_{compat::string_dict()};
};

models::StateDict tensors_of(const c10::impl::GenericDict& dict, const std::filesystem::path& file) {
  models::StateDict out;
  for (const auto& entry : dict) {
    DPT_CHECK(entry.key().isString() && entry.value().isTensor(), CheckpointError, "weights in ", file.string(),
              " have an entry of types ", entry.key().tagKind(), " -> ", entry.value().tagKind(),
              "; expected name -> tensor");
    out.insert(entry.key().toStringRef(), entry.value().toTensor());
  }
  return out;
}

}  // namespace

c10::IValue TrainingCheckpoint::to_ivalue() const {
  auto weights = compat::string_dict();
  for (const auto& item : state_dict) weights.insert(item.key(), item.value().detach().cpu().contiguous());
  auto sampler_state = compat::string_dict();
  sampler_state.insert("seed", static_cast<int64_t>(sampler.seed));
  sampler_state.insert("epoch", sampler.epoch);
  auto out = compat::string_dict();
  out.insert("epoch", epoch);
  out.insert("arch", arch);
  out.insert("state_dict", weights);
  out.insert("best_acc1", best_acc1);
  out.insert("optimizer", optimizer);
  out.insert("step_in_epoch", step_in_epoch);
  out.insert("global_step", global_step);
  out.insert("global_batch", global_batch);
  out.insert("samples_in_epoch", samples_in_epoch);
  out.insert("world_size", world_size);
  out.insert("lr_reference_batch", lr_reference_batch);
  out.insert("sampler", sampler_state);
  out.insert("scaler", scaler);
  out.insert("seed", static_cast<int64_t>(seed));
  out.insert("rng_state", rng_state.defined() ? rng_state : at::empty({0}, at::kByte));
  if (!model_ema.is_empty()) {
    auto ema = compat::string_dict();
    for (const auto& item : model_ema) ema.insert(item.key(), item.value().detach().cpu().contiguous());
    out.insert("model_ema", ema);
  }
  if (comm_hook.size() > 0) out.insert("comm_hook", comm_hook);
  if (bucket_cap_mb > 0) out.insert("bucket_cap_mb", bucket_cap_mb);
  return out;
}

TrainingCheckpoint TrainingCheckpoint::from_ivalue(const c10::IValue& value, const std::filesystem::path& file) {
  const Reader read(value, file);
  TrainingCheckpoint out;
  out.arch = read.get("arch", &c10::IValue::isString, "a string").toStringRef();
  out.epoch = read.integer("epoch");
  out.step_in_epoch = read.integer("step_in_epoch");
  out.global_step = read.integer("global_step");
  out.global_batch = read.integer("global_batch");
  out.samples_in_epoch = read.integer_or("samples_in_epoch", out.step_in_epoch * out.global_batch);
  out.world_size = read.integer_or("world_size", 0);
  out.lr_reference_batch = read.integer_or("lr_reference_batch", 0);
  out.best_acc1 = read.number("best_acc1");
  out.seed = static_cast<uint64_t>(read.integer("seed"));
  const Reader sampler(read.get("sampler", &c10::IValue::isGenericDict, "a dict"), file);
  out.sampler = {static_cast<uint64_t>(sampler.integer("seed")), sampler.integer("epoch")};
  out.state_dict = tensors_of(read.dict("state_dict"), file);
  out.optimizer = read.dict("optimizer");
  out.scaler = read.dict("scaler");
  out.rng_state = read.get("rng_state", &c10::IValue::isTensor, "a tensor").toTensor();
  if (read.has("model_ema")) out.model_ema = tensors_of(read.dict("model_ema"), file);
  if (read.has("comm_hook")) out.comm_hook = read.dict("comm_hook");
  if (read.has("bucket_cap_mb")) out.bucket_cap_mb = read.number("bucket_cap_mb");
  return out;
}

models::StateDict read_weights(const std::filesystem::path& file) {
  check_checkpoint_file(file, "weights file", "--pretrained");
  const c10::IValue loaded = load_checkpoint(file);
  DPT_CHECK(loaded.isGenericDict(), CheckpointError, "weights file ", file.string(), " holds a ", loaded.tagKind(),
            ", not a dict; save one from Python with torch.save(dict(model.state_dict()), path)");
  const auto dict = loaded.toGenericDict();
  auto nested = dict.find("state_dict");
  return tensors_of(nested != dict.end() && nested->value().isGenericDict() ? nested->value().toGenericDict() : dict,
                    file);
}

}  // namespace dpt::train
