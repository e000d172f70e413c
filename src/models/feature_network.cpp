#include "dptrain/models/feature_network.h"

#include <utility>

namespace dpt::models {

FeatureNetworkImpl::FeatureNetworkImpl(std::string family, std::function<FeatureNetworkParts()> build)
    : family_(std::move(family)), build_(std::move(build)) {
  reset();
}

void FeatureNetworkImpl::reset() {
  auto parts = build_();
  features = register_module("features", parts.features);
  classifier = register_module("classifier", parts.classifier);
  pool_ = parts.pool;
  flatten_ = parts.flatten;
}

torch::Tensor FeatureNetworkImpl::forward(torch::Tensor images) {
  auto x = features->forward(images);
  if (pool_) {
    x = torch::adaptive_avg_pool2d(x, {(*pool_)[0], (*pool_)[1]});
    if (flatten_) x = x.flatten(1);
  }
  return classifier->forward(x);
}

InvertedResidualImpl::InvertedResidualImpl(std::string branch_name, std::function<torch::nn::Sequential()> build_branch,
                                           bool residual, double stochastic_depth)
    : branch_name_(std::move(branch_name)),
      build_branch_(std::move(build_branch)),
      residual_(residual),
      stochastic_depth_(stochastic_depth) {
  reset();
}

void InvertedResidualImpl::reset() {
  branch_ = register_module(branch_name_, build_branch_());
  // Registered so train()/eval() reach it; it has no parameters, so the state dict is unchanged.
  if (residual_ && stochastic_depth_ > 0) drop_ = register_module("stochastic_depth", StochasticDepth(stochastic_depth_));
}

torch::Tensor InvertedResidualImpl::forward(const torch::Tensor& x) {
  auto out = branch_->forward(x);
  if (!residual_) return out;
  if (drop_) out = drop_(out);
  return out + x;
}

}  // namespace dpt::models
