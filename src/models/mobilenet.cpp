#include "dptrain/models/mobilenet.h"

#include <vector>

#include <torch/nn/modules/dropout.h>
#include <torch/nn/modules/linear.h>

#include "dptrain/common/error.h"
#include "dptrain/models/layers.h"

namespace dpt::models {

namespace nn = torch::nn;

namespace {

// MobileNetV2's block: expand 1x1 (unless t = 1), depthwise 3x3, linear 1x1 projection (a bare
// convolution and norm, entries 2 and 3 after two Conv2dNormActivations, as torchvision).
InvertedResidual v2_block(int64_t in, int64_t out, int64_t stride, int64_t expand_ratio, const NormLayer& norm_layer) {
  const int64_t hidden = in * expand_ratio;
  return InvertedResidual("conv", [=] {
    nn::Sequential branch;
    if (expand_ratio != 1) branch->push_back(conv_norm_activation(in, hidden, 1, 1, 1, Activation::ReLU6, norm_layer));
    branch->push_back(conv_norm_activation(hidden, hidden, 3, stride, hidden, Activation::ReLU6, norm_layer));
    branch->push_back(nn::Conv2d(nn::Conv2dOptions(hidden, out, 1).bias(false)));
    branch->push_back(make_norm(norm_layer, out));
    return branch;
  }, stride == 1 && in == out);
}

// One row of MobileNetV3's tables 1 and 2.
struct V3Block {
  int64_t in, kernel, expanded, out;
  bool squeeze_excite, hardswish;
  int64_t stride;
};

InvertedResidual v3_block(const V3Block& b, const NormLayer& norm_layer) {
  return InvertedResidual("block", [=] {
    const auto activation = b.hardswish ? Activation::Hardswish : Activation::ReLU;
    nn::Sequential branch;
    if (b.expanded != b.in) branch->push_back(conv_norm_activation(b.in, b.expanded, 1, 1, 1, activation, norm_layer));
    branch->push_back(conv_norm_activation(b.expanded, b.expanded, b.kernel, b.stride, b.expanded, activation, norm_layer));
    if (b.squeeze_excite) {
      branch->push_back(SqueezeExcitation(b.expanded, make_divisible(static_cast<double>(b.expanded / 4)),
                                          Activation::ReLU, Activation::Hardsigmoid));
    }
    branch->push_back(conv_norm_activation(b.expanded, b.out, 1, 1, 1, Activation::None, norm_layer));
    return branch;
  }, b.stride == 1 && b.in == b.out);
}

}  // namespace

FeatureNetwork mobilenet_v2(const ClassifierOptions& options, double width_mult) {
  return FeatureNetwork("MobileNetV2", [options, width_mult] {
    // Expansion t, channels c, repeats n, first stride s (the paper's table 2).
    const std::vector<std::array<int64_t, 4>> stages = {{1, 16, 1, 1},  {6, 24, 2, 2},  {6, 32, 3, 2}, {6, 64, 4, 2},
                                                        {6, 96, 3, 1},  {6, 160, 3, 2}, {6, 320, 1, 1}};
    const auto& norm = options.norm_layer();
    int64_t in = make_divisible(32 * width_mult);
    const int64_t last = make_divisible(1280 * std::max(1.0, width_mult));
    nn::Sequential features(conv_norm_activation(3, in, 3, 2, 1, Activation::ReLU6, norm));
    for (const auto& [t, c, n, s] : stages) {
      const int64_t out = make_divisible(static_cast<double>(c) * width_mult);
      for (int64_t i = 0; i < n; ++i) {
        features->push_back(v2_block(in, out, i == 0 ? s : 1, t, norm));
        in = out;
      }
    }
    features->push_back(conv_norm_activation(in, last, 1, 1, 1, Activation::ReLU6, norm));
    nn::Sequential classifier(nn::Dropout(nn::DropoutOptions(dropout_or(options, 0.2))),
                              nn::Linear(last, options.num_classes()));
    init_like_torchvision(*features, LinearInit::Normal);
    init_like_torchvision(*classifier, LinearInit::Normal);
    return FeatureNetworkParts{features, std::array<int64_t, 2>{1, 1}, classifier};
  });
}

FeatureNetwork mobilenet_v3(const std::string& size, const ClassifierOptions& options) {
  DPT_CHECK(size == "small" || size == "large", ConfigError, "MobileNetV3 comes in small and large, not ", size);
  return FeatureNetwork("MobileNetV3 " + size, [size, options] {
    // in, kernel, expanded, out, squeeze-excite, hardswish, stride (dilation 1, width 1).
    const std::vector<V3Block> large = {
        {16, 3, 16, 16, false, false, 1},    {16, 3, 64, 24, false, false, 2},    {24, 3, 72, 24, false, false, 1},
        {24, 5, 72, 40, true, false, 2},     {40, 5, 120, 40, true, false, 1},    {40, 5, 120, 40, true, false, 1},
        {40, 3, 240, 80, false, true, 2},    {80, 3, 200, 80, false, true, 1},    {80, 3, 184, 80, false, true, 1},
        {80, 3, 184, 80, false, true, 1},    {80, 3, 480, 112, true, true, 1},    {112, 3, 672, 112, true, true, 1},
        {112, 5, 672, 160, true, true, 2},   {160, 5, 960, 160, true, true, 1},   {160, 5, 960, 160, true, true, 1}};
    const std::vector<V3Block> small = {
        {16, 3, 16, 16, true, false, 2},   {16, 3, 72, 24, false, false, 2}, {24, 3, 88, 24, false, false, 1},
        {24, 5, 96, 40, true, true, 2},    {40, 5, 240, 40, true, true, 1},  {40, 5, 240, 40, true, true, 1},
        {40, 5, 120, 48, true, true, 1},   {48, 5, 144, 48, true, true, 1},  {48, 5, 288, 96, true, true, 2},
        {96, 5, 576, 96, true, true, 1},   {96, 5, 576, 96, true, true, 1}};
    const auto& blocks = size == "large" ? large : small;
    const int64_t last_channel = size == "large" ? 1280 : 1024;
    const auto norm = batch_norm(options.norm_layer(), /*eps=*/1e-3, /*momentum=*/0.01);
    nn::Sequential features(conv_norm_activation(3, blocks.front().in, 3, 2, 1, Activation::Hardswish, norm));
    for (const auto& b : blocks) features->push_back(v3_block(b, norm));
    const int64_t last_in = blocks.back().out;
    features->push_back(conv_norm_activation(last_in, 6 * last_in, 1, 1, 1, Activation::Hardswish, norm));
    nn::Sequential classifier(nn::Linear(6 * last_in, last_channel), ActivationLayer(Activation::Hardswish, true),
                              nn::Dropout(nn::DropoutOptions(dropout_or(options, 0.2)).inplace(true)),
                              nn::Linear(last_channel, options.num_classes()));
    init_like_torchvision(*features, LinearInit::Normal);
    init_like_torchvision(*classifier, LinearInit::Normal);
    return FeatureNetworkParts{features, std::array<int64_t, 2>{1, 1}, classifier};
  });
}

}  // namespace dpt::models
