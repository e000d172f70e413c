#include "non_finite_tensor.h"

#include <ATen/ATen.h>
#include <ATen/Dispatch.h>

#include <cmath>
#include <type_traits>

namespace dpt::train {
namespace {

template <typename T>
bool all_finite(const T* values, int64_t n) {
  using Wide = std::conditional_t<std::is_same_v<T, double>, double, float>;  // half and bfloat16 as float
  bool finite = true;  // no early exit: a finite state, the usual one, is read whole anyway
  for (int64_t i = 0; i < n; ++i) finite &= std::isfinite(static_cast<Wide>(values[i]));
  return finite;
}

bool all_finite(const at::Tensor& tensor) {
  // A host snapshot (the background writer's) is read as plain memory on the writer's thread:
  // ATen's kernels would run on the intra-op threads, at training's priority, beside training.
  // A dense tensor's elements fill its span of memory, whatever the order of its strides.
  if (tensor.device().is_cpu() && tensor.is_non_overlapping_and_dense()) {
    bool finite = true;
    AT_DISPATCH_FLOATING_TYPES_AND2(at::kHalf, at::kBFloat16, tensor.scalar_type(), "all_finite",
                                    [&] { finite = all_finite(tensor.data_ptr<scalar_t>(), tensor.numel()); });
    return finite;
  }
  return at::isfinite(tensor).all().item<bool>();
}

std::string key_name(const c10::IValue& key) {
  if (key.isString()) return key.toStringRef();
  if (key.isInt()) return std::to_string(key.toInt());
  return "?";
}

std::optional<std::string> find(const c10::IValue& value, const std::string& path) {
  auto below = [&path](const std::string& step) { return path.empty() ? step : path + "/" + step; };
  if (value.isTensor()) {
    const at::Tensor& tensor = value.toTensor();
    if (tensor.defined() && at::isFloatingType(tensor.scalar_type()) && !all_finite(tensor)) return path;
    return std::nullopt;
  }
  if (value.isGenericDict()) {
    for (const auto& item : value.toGenericDict()) {
      if (auto found = find(item.value(), below(key_name(item.key())))) return found;
    }
  } else if (value.isList()) {
    const auto list = value.toList();
    for (size_t i = 0; i < list.size(); ++i) {
      if (auto found = find(list.get(i), below(std::to_string(i)))) return found;
    }
  } else if (value.isTuple()) {
    const auto& elements = value.toTuple()->elements();
    for (size_t i = 0; i < elements.size(); ++i) {
      if (auto found = find(elements[i], below(std::to_string(i)))) return found;
    }
  }
  return std::nullopt;
}

}  // namespace

std::optional<std::string> first_non_finite_tensor(const c10::IValue& state) { return find(state, ""); }

}  // namespace dpt::train
