#include "dptrain/models/efficientnet.h"

#include <cmath>
#include <map>
#include <vector>

#include <torch/nn/modules/dropout.h>
#include <torch/nn/modules/linear.h>

#include "dptrain/common/error.h"
#include "dptrain/models/layers.h"

namespace dpt::models {

namespace nn = torch::nn;

namespace {

// One stage of the network: `layers` blocks, the first with `stride` and `in` channels.
struct Stage {
  bool fused;  // FusedMBConv (V2's early stages) instead of MBConv
  int64_t expand_ratio, kernel, stride, in, out, layers;
};

struct Variant {
  double width_mult, depth_mult, dropout;
  // Batch norm eps and momentum (torchvision: PyTorch's defaults for b0-b4).
  double eps, momentum;
  std::vector<Stage> stages;
  int64_t last_channel;  // 0: 4 x the last stage's channels
};

const std::vector<Stage>& v1_stages() {
  static const std::vector<Stage> stages = {{false, 1, 3, 1, 32, 16, 1},  {false, 6, 3, 2, 16, 24, 2},
                                            {false, 6, 5, 2, 24, 40, 2},  {false, 6, 3, 2, 40, 80, 3},
                                            {false, 6, 5, 1, 80, 112, 3}, {false, 6, 5, 2, 112, 192, 4},
                                            {false, 6, 3, 1, 192, 320, 1}};
  return stages;
}

const Variant& variant_named(const std::string& name) {
  static const std::map<std::string, Variant> variants = {
      {"b0", {1.0, 1.0, 0.2, 1e-5, 0.1, v1_stages(), 0}},   {"b1", {1.0, 1.1, 0.2, 1e-5, 0.1, v1_stages(), 0}},
      {"b2", {1.1, 1.2, 0.3, 1e-5, 0.1, v1_stages(), 0}},   {"b3", {1.2, 1.4, 0.3, 1e-5, 0.1, v1_stages(), 0}},
      {"b4", {1.4, 1.8, 0.4, 1e-5, 0.1, v1_stages(), 0}},   {"b5", {1.6, 2.2, 0.4, 1e-3, 0.01, v1_stages(), 0}},
      {"b6", {1.8, 2.6, 0.5, 1e-3, 0.01, v1_stages(), 0}},  {"b7", {2.0, 3.1, 0.5, 1e-3, 0.01, v1_stages(), 0}},
      {"v2_s",
       {1.0, 1.0, 0.2, 1e-3, 0.1,
        {{true, 1, 3, 1, 24, 24, 2}, {true, 4, 3, 2, 24, 48, 4}, {true, 4, 3, 2, 48, 64, 4},
         {false, 4, 3, 2, 64, 128, 6}, {false, 6, 3, 1, 128, 160, 9}, {false, 6, 3, 2, 160, 256, 15}},
        1280}},
      {"v2_m",
       {1.0, 1.0, 0.3, 1e-3, 0.1,
        {{true, 1, 3, 1, 24, 24, 3}, {true, 4, 3, 2, 24, 48, 5}, {true, 4, 3, 2, 48, 80, 5},
         {false, 4, 3, 2, 80, 160, 7}, {false, 6, 3, 1, 160, 176, 14}, {false, 6, 3, 2, 176, 304, 18},
         {false, 6, 3, 1, 304, 512, 5}},
        1280}},
      {"v2_l",
       {1.0, 1.0, 0.4, 1e-3, 0.1,
        {{true, 1, 3, 1, 32, 32, 4}, {true, 4, 3, 2, 32, 64, 7}, {true, 4, 3, 2, 64, 96, 7},
         {false, 4, 3, 2, 96, 192, 10}, {false, 6, 3, 1, 192, 224, 19}, {false, 6, 3, 2, 224, 384, 25},
         {false, 6, 3, 1, 384, 640, 7}},
        1280}},
  };
  auto found = variants.find(name);
  DPT_CHECK(found != variants.end(), ConfigError, "EfficientNet has variants b0-b7, v2_s, v2_m and v2_l, not ", name);
  return found->second;
}

// MBConv: expand 1x1 (unless the ratio is 1), depthwise, squeeze-excite (to a quarter of the
// block's input channels), linear 1x1 projection.
nn::Sequential mbconv_branch(int64_t in, int64_t out, int64_t expand_ratio, int64_t kernel, int64_t stride,
                             const NormLayer& norm) {
  const int64_t expanded = make_divisible(static_cast<double>(in * expand_ratio));
  nn::Sequential branch;
  if (expanded != in) branch->push_back(conv_norm_activation(in, expanded, 1, 1, 1, Activation::SiLU, norm));
  branch->push_back(conv_norm_activation(expanded, expanded, kernel, stride, expanded, Activation::SiLU, norm));
  branch->push_back(SqueezeExcitation(expanded, std::max<int64_t>(1, in / 4), Activation::SiLU, Activation::Sigmoid));
  branch->push_back(conv_norm_activation(expanded, out, 1, 1, 1, Activation::None, norm));
  return branch;
}

// FusedMBConv: one full convolution in place of expansion and depthwise, then the projection.
nn::Sequential fused_branch(int64_t in, int64_t out, int64_t expand_ratio, int64_t kernel, int64_t stride,
                            const NormLayer& norm) {
  const int64_t expanded = make_divisible(static_cast<double>(in * expand_ratio));
  if (expanded == in) return nn::Sequential(conv_norm_activation(in, out, kernel, stride, 1, Activation::SiLU, norm));
  return nn::Sequential(conv_norm_activation(in, expanded, kernel, stride, 1, Activation::SiLU, norm),
                        conv_norm_activation(expanded, out, 1, 1, 1, Activation::None, norm));
}

}  // namespace

FeatureNetwork efficientnet(const std::string& name, const ClassifierOptions& options) {
  const Variant& variant = variant_named(name);
  return FeatureNetwork("EfficientNet " + name, [variant, options] {
    const auto norm = batch_norm(options.norm_layer(), variant.eps, variant.momentum);
    const double stochastic_depth = options.stochastic_depth().value_or(0.2);
    // Channels scale by width_mult (rounded to multiples of 8) and depths by depth_mult (rounded
    // up) in B1-B7; V2 fixes both.
    auto channels = [&](int64_t c) { return make_divisible(static_cast<double>(c) * variant.width_mult); };
    std::vector<Stage> stages = variant.stages;
    int64_t total_blocks = 0;
    for (auto& stage : stages) {
      if (!stage.fused) {
        stage.in = channels(stage.in);
        stage.out = channels(stage.out);
        stage.layers = static_cast<int64_t>(std::ceil(static_cast<double>(stage.layers) * variant.depth_mult));
      }
      total_blocks += stage.layers;
    }
    nn::Sequential features(conv_norm_activation(3, stages.front().in, 3, 2, 1, Activation::SiLU, norm));
    int64_t block_id = 0;
    for (const auto& stage : stages) {
      Stack blocks;
      for (int64_t i = 0; i < stage.layers; ++i, ++block_id) {
        const int64_t in = i == 0 ? stage.in : stage.out;
        const int64_t stride = i == 0 ? stage.stride : 1;
        const double drop = stochastic_depth * static_cast<double>(block_id) / static_cast<double>(total_blocks);
        const auto make = stage.fused ? &fused_branch : &mbconv_branch;
        blocks->push_back(InvertedResidual(
            "block", [=, out = stage.out, ratio = stage.expand_ratio, kernel = stage.kernel] {
              return make(in, out, ratio, kernel, stride, norm);
            },
            stride == 1 && in == stage.out, drop));
      }
      features->push_back(blocks);
    }
    const int64_t last_in = stages.back().out;
    const int64_t last_out = variant.last_channel ? variant.last_channel : 4 * last_in;
    features->push_back(conv_norm_activation(last_in, last_out, 1, 1, 1, Activation::SiLU, norm));
    nn::Sequential classifier(nn::Dropout(nn::DropoutOptions(dropout_or(options, variant.dropout)).inplace(true)),
                              nn::Linear(last_out, options.num_classes()));
    init_like_torchvision(*features, LinearInit::UniformOut);
    init_like_torchvision(*classifier, LinearInit::UniformOut);
    return FeatureNetworkParts{features, std::array<int64_t, 2>{1, 1}, classifier};
  });
}

}  // namespace dpt::models
