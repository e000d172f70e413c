#pragma once
// The hook dpt::convert_sync_batchnorm (parallel layer) uses to swap norm layers that a module
// calls through members of its own (LibTorch modules call their children directly, not through
// the registry). The models implement it and know nothing of SyncBatchNorm: they take a
// NormLayerFactory, and the parallel layer, which uses this one, hands them its own.
//
//   class BlockImpl : public torch::nn::Cloneable<BlockImpl>, public dpt::NormLayerHolder {
//     void replace_norm_layer(const std::string& name, torch::nn::AnyModule layer,
//                             dpt::NormLayerFactory factory) override {
//       DPT_CHECK(name == "bn", ConfigError, "no norm layer '", name, "'");
//       bn_ = std::move(layer);
//       replace_module(name, bn_.ptr());
//       norm_layer_ = std::move(factory);  // what reset() builds bn_ with
//     }
//     torch::nn::AnyModule bn_;
//     dpt::NormLayerFactory norm_layer_;
//   };

#include <cstdint>
#include <functional>
#include <string>

#include <torch/nn/modules/container/any.h>

namespace dpt {

// Makes a normalisation layer for `num_features` channels (dpt::sync_batch_norm_factory, or a
// model's own choice, dpt::models::NormLayer).
using NormLayerFactory = std::function<torch::nn::AnyModule(int64_t num_features)>;

// Implemented by modules whose forward() calls norm layers held in members, so that
// convert_sync_batchnorm can swap them.
class NormLayerHolder {
 public:
  virtual ~NormLayerHolder() = default;
  // Makes `layer` the child registered as `name`, both in the registry and in what forward()
  // calls. `factory` makes layers like it for any channel count: a module that rebuilds its
  // children (reset(), and so clone()) keeps it, so that it rebuilds the same kind of layer.
  // Throws ConfigError when `name` is not one of this module's norm layers.
  virtual void replace_norm_layer(const std::string& name, torch::nn::AnyModule layer, NormLayerFactory factory) = 0;
};

}  // namespace dpt
