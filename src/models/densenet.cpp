#include "dptrain/models/densenet.h"

#include <map>
#include <string>
#include <tuple>
#include <utility>

#include <torch/nn/init.h>
#include <torch/nn/modules/conv.h>
#include <torch/nn/modules/dropout.h>
#include <torch/nn/modules/pooling.h>

#include "dptrain/common/error.h"

namespace dpt::models {

namespace nn = torch::nn;

namespace {


// torchvision's _DenseLayer: norm1, relu1, conv1, norm2, relu2, conv2 (and F.dropout after them,
// here a Dropout child only when it drops anything, so the names stay torchvision's).
Stack dense_layer(int64_t in, int64_t growth, int64_t bottleneck, double dropout, const NormLayer& norm_layer) {
  Stack layer;
  layer->push_back("norm1", make_norm(norm_layer, in));
  layer->push_back("relu1", relu_inplace());
  layer->push_back("conv1", conv_before_norm(in, bottleneck * growth, 1));
  layer->push_back("norm2", make_norm(norm_layer, bottleneck * growth));
  layer->push_back("relu2", relu_inplace());
  layer->push_back("conv2", conv_before_norm(bottleneck * growth, growth, 3));
  if (dropout > 0) layer->push_back("dropout", nn::Dropout(nn::DropoutOptions(dropout)));
  return layer;
}

// torchvision's _Transition: norm, relu, 1x1 conv to `out` channels, 2x2 average pooling.
Stack transition(int64_t in, int64_t out, const NormLayer& norm_layer) {
  Stack layer;
  layer->push_back("norm", make_norm(norm_layer, in));
  layer->push_back("relu", relu_inplace());
  layer->push_back("conv", conv_before_norm(in, out, 1));
  layer->push_back("pool", nn::AvgPool2d(nn::AvgPool2dOptions(2).stride(2)));
  return layer;
}

}  // namespace

DenseBlockImpl::DenseBlockImpl(int64_t layers, int64_t in_channels, int64_t growth, int64_t bottleneck, double dropout,
                               NormLayer norm_layer)
    : layers_(layers),
      in_channels_(in_channels),
      growth_(growth),
      bottleneck_(bottleneck),
      dropout_(dropout),
      norm_layer_(std::move(norm_layer)) {
  reset();
}

void DenseBlockImpl::reset() {
  dense_layers_.clear();
  for (int64_t i = 0; i < layers_; ++i) {
    dense_layers_.push_back(register_module(
        "denselayer" + std::to_string(i + 1),
        dense_layer(in_channels_ + i * growth_, growth_, bottleneck_, dropout_, norm_layer_)));
  }
}

torch::Tensor DenseBlockImpl::forward(const torch::Tensor& x) {
  std::vector<torch::Tensor> features{x};
  features.reserve(dense_layers_.size() + 1);
  for (auto& layer : dense_layers_) features.push_back(layer->forward(torch::cat(features, 1)));
  return torch::cat(features, 1);
}

DenseNetImpl::DenseNetImpl(int64_t growth, std::vector<int64_t> block_layers, int64_t stem_channels,
                           ClassifierOptions options)
    : growth_(growth), block_layers_(std::move(block_layers)), stem_channels_(stem_channels), options_(std::move(options)) {
  reset();
}

void DenseNetImpl::reset() {
  constexpr int64_t kBottleneck = 4;  // torchvision's bn_size
  const auto& norm = options_.norm_layer();
  Stack features;
  features->push_back("conv0", conv_before_norm(3, stem_channels_, 7, 2));
  features->push_back("norm0", make_norm(norm, stem_channels_));
  features->push_back("relu0", relu_inplace());
  features->push_back("pool0", nn::MaxPool2d(nn::MaxPool2dOptions(3).stride(2).padding(1)));
  int64_t channels = stem_channels_;
  for (size_t i = 0; i < block_layers_.size(); ++i) {
    const auto name = std::to_string(i + 1);
    features->push_back("denseblock" + name, DenseBlock(block_layers_[i], channels, growth_, kBottleneck,
                                                        dropout_or(options_, 0), norm));
    channels += block_layers_[i] * growth_;
    if (i + 1 < block_layers_.size()) {
      features->push_back("transition" + name, transition(channels, channels / 2, norm));
      channels /= 2;
    }
  }
  features->push_back("norm5", make_norm(norm, channels));
  features_ = register_module("features", features);
  classifier_ = register_module("classifier", nn::Linear(channels, options_.num_classes()));

  // torchvision: Kaiming-normal convolutions (fan_in, unlike the other families' fan_out), the
  // linear layer's bias 0; the norms' own reset() already set 1 and 0.
  torch::NoGradGuard no_grad;
  for (const auto& module : modules(/*include_self=*/false)) {
    if (auto* c = module->as<nn::Conv2d>()) nn::init::kaiming_normal_(c->weight);
  }
  classifier_->bias.zero_();
}

torch::Tensor DenseNetImpl::forward(const torch::Tensor& images) {
  auto x = features_->forward(images).relu_();  // in place on norm5's output, as torchvision
  return classifier_(torch::adaptive_avg_pool2d(x, {1, 1}).flatten(1));
}

DenseNet densenet(int depth, const ClassifierOptions& options) {
  // depth -> growth rate, layers per block, stem channels (torchvision's table)
  static const std::map<int, std::tuple<int64_t, std::vector<int64_t>, int64_t>> layouts = {
      {121, {32, {6, 12, 24, 16}, 64}},
      {161, {48, {6, 12, 36, 24}, 96}},
      {169, {32, {6, 12, 32, 32}, 64}},
      {201, {32, {6, 12, 48, 32}, 64}},
  };
  auto layout = layouts.find(depth);
  DPT_CHECK(layout != layouts.end(), ConfigError, "DenseNet has depths 121, 161, 169 and 201, not ", depth);
  const auto& [growth, blocks, stem] = layout->second;
  return DenseNet(growth, blocks, stem, options);
}

}  // namespace dpt::models
