#include "dptrain/models/convnext.h"

#include <map>
#include <utility>
#include <vector>

#include <torch/nn/modules/conv.h>
#include <torch/nn/modules/linear.h>
#include <torch/nn/modules/normalization.h>

#include "dptrain/common/error.h"
#include "dptrain/models/layers.h"

namespace dpt::models {

namespace nn = torch::nn;

namespace {

constexpr double kLayerScale = 1e-6;  // the branch's initial weight (torchvision's layer_scale)

// torchvision's CNBlock: x + stochastic_depth(layer_scale * block(x)), block = depthwise 7x7,
// channels-last LayerNorm, Linear to 4x, GELU, Linear back.
class ConvNeXtBlockImpl : public nn::Cloneable<ConvNeXtBlockImpl> {
 public:
  ConvNeXtBlockImpl(int64_t channels, double stochastic_depth) : channels_(channels), stochastic_depth_(stochastic_depth) {
    reset();
  }

  void reset() override {
    layer_scale_ = register_parameter("layer_scale", torch::full({channels_, 1, 1}, kLayerScale));
    block_ = register_module(
        "block", Stack(nn::Conv2d(nn::Conv2dOptions(channels_, channels_, 7).padding(3).groups(channels_)),
                       Permute(std::vector<int64_t>{0, 2, 3, 1}),
                       nn::LayerNorm(nn::LayerNormOptions({channels_}).eps(1e-6)), nn::Linear(channels_, 4 * channels_),
                       ActivationLayer(Activation::GELU), nn::Linear(4 * channels_, channels_),
                       Permute(std::vector<int64_t>{0, 3, 1, 2})));
    drop_ = register_module("stochastic_depth", StochasticDepth(stochastic_depth_));
  }

  torch::Tensor forward(const torch::Tensor& x) { return drop_(layer_scale_ * block_(x)) + x; }

 private:
  int64_t channels_;
  double stochastic_depth_;
  torch::Tensor layer_scale_;
  Stack block_{nullptr};
  StochasticDepth drop_{nullptr};
};
TORCH_MODULE(ConvNeXtBlock);

// One row of the paper's section 3 settings: a stage's channels, blocks, and the channels the
// downsampling after it leads to (0 after the last stage).
struct StageSetting {
  int64_t channels, blocks, next_channels;
};

struct Layout {
  std::vector<StageSetting> stages;
  double stochastic_depth;
};

}  // namespace

FeatureNetwork convnext(const std::string& size, const ClassifierOptions& options) {
  static const std::map<std::string, Layout> layouts = {
      {"tiny", {{{96, 3, 192}, {192, 3, 384}, {384, 9, 768}, {768, 3, 0}}, 0.1}},
      {"small", {{{96, 3, 192}, {192, 3, 384}, {384, 27, 768}, {768, 3, 0}}, 0.4}},
      {"base", {{{128, 3, 256}, {256, 3, 512}, {512, 27, 1024}, {1024, 3, 0}}, 0.5}},
      {"large", {{{192, 3, 384}, {384, 3, 768}, {768, 27, 1536}, {1536, 3, 0}}, 0.5}},
  };
  auto layout = layouts.find(size);
  DPT_CHECK(layout != layouts.end(), ConfigError, "ConvNeXt has sizes tiny, small, base and large, not '", size, "'");
  return FeatureNetwork("ConvNeXt " + size, [layout = layout->second, options] {
    const auto& stages = layout.stages;
    const int64_t first = stages.front().channels, last = stages.back().channels;
    nn::Sequential features(
        Stack(nn::Conv2d(nn::Conv2dOptions(3, first, 4).stride(4)), LayerNorm2d(first)));
    int64_t total_blocks = 0;
    for (const auto& stage : stages) total_blocks += stage.blocks;
    const double stochastic_depth = options.stochastic_depth().value_or(layout.stochastic_depth);
    int64_t block_id = 0;
    for (const auto& stage : stages) {
      Stack blocks;
      for (int64_t i = 0; i < stage.blocks; ++i, ++block_id) {
        const double drop = stochastic_depth * static_cast<double>(block_id) / (static_cast<double>(total_blocks) - 1.0);
        blocks->push_back(ConvNeXtBlock(stage.channels, drop));
      }
      features->push_back(blocks);
      if (stage.next_channels > 0) {
        features->push_back(Stack(LayerNorm2d(stage.channels),
                                  nn::Conv2d(nn::Conv2dOptions(stage.channels, stage.next_channels, 2).stride(2))));
      }
    }
    nn::Sequential classifier(LayerNorm2d(last), Flatten(), nn::Linear(last, options.num_classes()));
    init_truncated_normal(*features, 0.02, /*zero_biases=*/true);
    init_truncated_normal(*classifier, 0.02, /*zero_biases=*/true);
    FeatureNetworkParts parts{features, std::array<int64_t, 2>{1, 1}, classifier};
    parts.flatten = false;  // the classifier's LayerNorm2d wants NCHW
    return parts;
  });
}

}  // namespace dpt::models
