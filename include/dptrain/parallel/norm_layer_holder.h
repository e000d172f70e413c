#pragma once
// The hook dpt::convert_sync_batchnorm uses to swap norm layers that a module calls through
// members of its own (LibTorch modules call their children directly, not through the registry).
//
//   class BlockImpl : public torch::nn::Cloneable<BlockImpl>, public dpt::NormLayerHolder {
//     void replace_norm_layer(const std::string& name, torch::nn::AnyModule layer) override {
//       DPT_CHECK(name == "bn", ConfigError, "no norm layer '", name, "'");
//       bn_ = std::move(layer);
//       replace_module(name, bn_.ptr());
//     }
//     torch::nn::AnyModule bn_;
//   };

#include <string>

#include <torch/nn/modules/container/any.h>

namespace dpt {

// Implemented by modules whose forward() calls norm layers held in members, so that
// convert_sync_batchnorm can swap them.
class NormLayerHolder {
 public:
  virtual ~NormLayerHolder() = default;
  // Makes `layer` the child registered as `name`, both in the registry and in what forward()
  // calls. Throws ConfigError when `name` is not one of this module's norm layers.
  virtual void replace_norm_layer(const std::string& name, torch::nn::AnyModule layer) = 0;
};

}  // namespace dpt
