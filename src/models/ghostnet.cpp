#include "dptrain/models/ghostnet.h"

#include <cmath>
#include <utility>
#include <vector>

#include <torch/nn/modules/conv.h>
#include <torch/nn/modules/linear.h>

#include "dptrain/common/error.h"

namespace dpt::models {

namespace nn = torch::nn;

namespace {


// A convolution, its norm and (when `activate`) ReLU: the reference's Sequentials 0, 1, 2.
Stack conv_norm(nn::Conv2d convolution, int64_t out, bool activate, const NormLayer& norm) {
  Stack layers(std::move(convolution));
  layers->push_back(make_norm(norm, out));
  if (activate) layers->push_back(relu_inplace());
  return layers;
}

// The Ghost module: a 1x1 `primary_conv` makes half the output channels, a depthwise 3x3
// `cheap_operation` makes the other half from them; the concatenation is cut to `out` channels.
class GhostModuleImpl : public nn::Cloneable<GhostModuleImpl> {
 public:
  GhostModuleImpl(int64_t in, int64_t out, bool activate, NormLayer norm)
      : in_(in), out_(out), activate_(activate), norm_(std::move(norm)) {
    reset();
  }

  void reset() override {
    const int64_t primary = (out_ + 1) / 2;  // ceil(out / ratio 2)
    primary_ = register_module("primary_conv", conv_norm(conv_before_norm(in_, primary, 1), primary, activate_, norm_));
    cheap_ = register_module("cheap_operation",
                             conv_norm(conv_before_norm(primary, primary, 3, 1, primary), primary, activate_, norm_));
  }

  torch::Tensor forward(const torch::Tensor& x) {
    auto primary = primary_(x);
    return torch::cat({primary, cheap_(primary)}, 1).narrow(1, 0, out_);
  }

 private:
  int64_t in_, out_;
  bool activate_;
  NormLayer norm_;
  Stack primary_{nullptr}, cheap_{nullptr};
};
TORCH_MODULE(GhostModule);

// One row of the reference's configuration: kernel, expansion channels, output channels,
// squeeze-excitation ratio (0: none), stride.
struct BottleneckSetting {
  int64_t kernel, expansion, out;
  double se_ratio;
  int64_t stride;
};

// The Ghost bottleneck: ghost1 (expansion, ReLU), a depthwise conv_dw/bn_dw where it strides,
// squeeze-excitation `se` (hard-sigmoid gate), ghost2 (projection, linear), plus the input through
// `shortcut` (identity, or depthwise then pointwise convolutions with norms where the shape changes).
class GhostBottleneckImpl : public nn::Cloneable<GhostBottleneckImpl>, public NormLayerHolder {
 public:
  GhostBottleneckImpl(int64_t in, int64_t mid, int64_t out, BottleneckSetting setting, NormLayer norm)
      : in_(in), mid_(mid), out_(out), setting_(setting), norm_(std::move(norm)) {
    reset();
  }

  void reset() override {
    const int64_t k = setting_.kernel, stride = setting_.stride;
    ghost1_ = register_module("ghost1", GhostModule(in_, mid_, true, norm_));
    if (stride > 1) {
      conv_dw_ = register_module("conv_dw", conv_before_norm(mid_, mid_, k, stride, mid_));
      bn_dw_ = make_norm(norm_, mid_);
      register_module("bn_dw", bn_dw_.ptr());
    }
    if (setting_.se_ratio > 0) {
      se_ = register_module("se", SqueezeExcitation(mid_, make_divisible(static_cast<double>(mid_) * setting_.se_ratio, 4),
                                                    Activation::ReLU, Activation::Hardsigmoid,
                                                    std::array<std::string, 2>{"conv_reduce", "conv_expand"}));
    }
    ghost2_ = register_module("ghost2", GhostModule(mid_, out_, false, norm_));
    if (in_ != out_ || stride != 1) {
      Stack shortcut(conv_before_norm(in_, in_, k, stride, in_));
      shortcut->push_back(make_norm(norm_, in_));
      shortcut->push_back(conv_before_norm(in_, out_, 1));
      shortcut->push_back(make_norm(norm_, out_));
      shortcut_ = register_module("shortcut", shortcut);
    }
  }

  torch::Tensor forward(const torch::Tensor& x) {
    auto y = ghost1_(x);
    if (conv_dw_) y = bn_dw_.forward(conv_dw_(y));
    if (se_) y = se_(y);
    y = ghost2_(y);
    return y + (shortcut_ ? shortcut_(x) : x);
  }

  void replace_norm_layer(const std::string& name, nn::AnyModule layer, NormLayer factory) override {
    DPT_CHECK(name == "bn_dw" && conv_dw_, ConfigError, "a Ghost bottleneck has no norm layer '", name, "' of its own");
    swap_norm_layer(*this, name, bn_dw_, std::move(layer), std::move(factory), norm_);
  }

 private:
  int64_t in_, mid_, out_;
  BottleneckSetting setting_;
  NormLayer norm_;
  GhostModule ghost1_{nullptr}, ghost2_{nullptr};
  nn::Conv2d conv_dw_{nullptr};
  nn::AnyModule bn_dw_;
  SqueezeExcitation se_{nullptr};
  Stack shortcut_{nullptr};
};
TORCH_MODULE(GhostBottleneck);

}  // namespace

GhostNetImpl::GhostNetImpl(double width, ClassifierOptions options) : width_(width), options_(std::move(options)) {
  DPT_CHECK(width_ > 0, ConfigError, "GhostNet's width must be positive, got ", width_);
  reset();
}

void GhostNetImpl::reset() {
  // The reference's stages (the paper's table 1), each a list of bottlenecks.
  static const std::vector<std::vector<BottleneckSetting>> stages = {
      {{3, 16, 16, 0, 1}},
      {{3, 48, 24, 0, 2}},
      {{3, 72, 24, 0, 1}},
      {{5, 72, 40, 0.25, 2}},
      {{5, 120, 40, 0.25, 1}},
      {{3, 240, 80, 0, 2}},
      {{3, 200, 80, 0, 1}, {3, 184, 80, 0, 1}, {3, 184, 80, 0, 1}, {3, 480, 112, 0.25, 1}, {3, 672, 112, 0.25, 1}},
      {{5, 672, 160, 0.25, 2}},
      {{5, 960, 160, 0, 1}, {5, 960, 160, 0.25, 1}, {5, 960, 160, 0, 1}, {5, 960, 160, 0.25, 1}},
  };
  const auto& norm = options_.norm_layer();
  auto scaled = [this](int64_t channels) { return make_divisible(static_cast<double>(channels) * width_, 4); };
  int64_t in = scaled(16);
  conv_stem_ = register_module("conv_stem", conv_before_norm(3, in, 3, 2));
  bn1_ = make_norm(norm, in);
  register_module("bn1", bn1_.ptr());
  Stack blocks;
  for (const auto& stage : stages) {
    Stack bottlenecks;
    for (const auto& setting : stage) {
      const int64_t out = scaled(setting.out);
      bottlenecks->push_back(GhostBottleneck(in, scaled(setting.expansion), out, setting, norm));
      in = out;
    }
    blocks->push_back(bottlenecks);
  }
  // The reference's last stage: its ConvBnAct (conv, bn1, act1) to the last expansion width.
  const int64_t last = scaled(stages.back().back().expansion);
  Stack head_stage;
  head_stage->push_back("conv", conv_before_norm(in, last, 1));
  head_stage->push_back("bn1", make_norm(norm, last));
  head_stage->push_back("act1", relu_inplace());
  Stack last_stage;  // a Sequential of the one ConvBnAct, as the reference's
  last_stage->push_back(head_stage);
  blocks->push_back(last_stage);
  blocks_ = register_module("blocks", blocks);
  conv_head_ = register_module("conv_head", nn::Conv2d(nn::Conv2dOptions(last, 1280, 1)));
  classifier_ = register_module("classifier", nn::Linear(1280, options_.num_classes()));
}

torch::Tensor GhostNetImpl::forward(const torch::Tensor& images) {
  auto x = blocks_(torch::relu(bn1_.forward(conv_stem_(images))));
  x = torch::relu(conv_head_(torch::adaptive_avg_pool2d(x, {1, 1}))).flatten(1);
  return classifier_(torch::dropout(x, dropout_or(options_, 0.2), is_training()));
}

void GhostNetImpl::replace_norm_layer(const std::string& name, nn::AnyModule layer, NormLayer factory) {
  DPT_CHECK(name == "bn1", ConfigError, "GhostNet has no norm layer '", name, "' of its own");
  swap_norm_layer(*this, name, bn1_, std::move(layer), std::move(factory), options_.norm_layer());
}

GhostNet ghostnet(double width, const ClassifierOptions& options) { return GhostNet(width, options); }

}  // namespace dpt::models
