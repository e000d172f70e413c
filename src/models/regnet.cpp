#include "dptrain/models/regnet.h"

#include <cmath>
#include <map>
#include <string>
#include <utility>

#include <torch/nn/modules/conv.h>

#include "dptrain/common/error.h"

namespace dpt::models {

namespace nn = torch::nn;

namespace {

// torchvision's ResBottleneckBlock: relu(proj(x) + f(x)), proj (a 1x1 convolution and norm) only
// where the shape changes; f is a, b (grouped 3x3, carrying the stride), se (Y models), c.
class BottleneckBlockImpl : public nn::Cloneable<BottleneckBlockImpl> {
 public:
  BottleneckBlockImpl(int64_t in, int64_t out, int64_t stride, int64_t group_width, double se_ratio,
                      NormLayer norm_layer)
      : in_(in), out_(out), stride_(stride), group_width_(group_width), se_ratio_(se_ratio),
        norm_layer_(std::move(norm_layer)) {
    reset();
  }

  void reset() override {
    if (in_ != out_ || stride_ != 1) {
      proj_ = register_module("proj", conv_norm_activation(in_, out_, 1, stride_, 1, Activation::None, norm_layer_));
    }
    // The bottleneck is as wide as the block (torchvision's bottleneck_multiplier is 1 throughout).
    Stack f;
    f->push_back("a", conv_norm_activation(in_, out_, 1, 1, 1, Activation::ReLU, norm_layer_));
    f->push_back("b", conv_norm_activation(out_, out_, 3, stride_, out_ / group_width_, Activation::ReLU, norm_layer_));
    if (se_ratio_ > 0) {
      f->push_back("se", SqueezeExcitation(out_, std::llround(se_ratio_ * static_cast<double>(in_))));
    }
    f->push_back("c", conv_norm_activation(out_, out_, 1, 1, 1, Activation::None, norm_layer_));
    f_ = register_module("f", f);
  }

  torch::Tensor forward(const torch::Tensor& x) {
    auto sum = (proj_ ? proj_(x) : x) + f_(x);
    return sum.relu_();
  }

 private:
  int64_t in_, out_, stride_, group_width_;
  double se_ratio_;
  NormLayer norm_layer_;
  Stack proj_{nullptr}, f_{nullptr};
};
TORCH_MODULE(BottleneckBlock);

}  // namespace

std::vector<RegNetStage> regnet_stages(const RegNetDesign& design) {
  DPT_CHECK(design.w_a() >= 0 && design.w_0() > 0 && design.w_m() > 1 && design.w_0() % 8 == 0, ConfigError,
            "a RegNet design needs w_a >= 0, w_0 > 0 and a multiple of 8, and w_m > 1");
  // Block widths: w_0 * w_m^round(log_{w_m}((w_0 + w_a j) / w_0)), quantised to multiples of 8.
  // The same float32 operations as torchvision's, so that ties round alike.
  const auto linear = torch::arange(design.depth()) * design.w_a() + design.w_0();
  const auto steps = torch::round(torch::log(linear / design.w_0()) / std::log(design.w_m()));
  const auto widths = (torch::round(design.w_0() * torch::pow(design.w_m(), steps) / 8) * 8).to(torch::kLong);
  std::vector<RegNetStage> stages;
  for (int64_t j = 0; j < design.depth(); ++j) {
    const int64_t width = widths[j].item<int64_t>();
    if (stages.empty() || stages.back().width != width) {
      stages.push_back({width, 0, design.group_width()});
    }
    ++stages.back().depth;
  }
  // A stage's width must be a multiple of its group width (and no group wider than the stage).
  for (auto& stage : stages) {
    stage.group_width = std::min(stage.group_width, stage.width);
    stage.width = make_divisible(static_cast<double>(stage.width), stage.group_width);
  }
  return stages;
}

RegNetImpl::RegNetImpl(RegNetDesign design, ClassifierOptions options)
    : design_(std::move(design)), options_(std::move(options)) {
  reset();
}

void RegNetImpl::reset() {
  constexpr int64_t kStemWidth = 32;
  const auto& norm = options_.norm_layer();
  stem_ = register_module("stem", conv_norm_activation(3, kStemWidth, 3, 2, 1, Activation::ReLU, norm));
  trunk_output_ = Stack();
  int64_t in = kStemWidth;
  const auto stages = regnet_stages(design_);
  for (size_t s = 0; s < stages.size(); ++s) {
    std::string stage_name = "block" + std::to_string(s + 1);
    Stack stage;
    for (int64_t i = 0; i < stages[s].depth; ++i) {
      stage->push_back(stage_name + "-" + std::to_string(i),
                       BottleneckBlock(i == 0 ? in : stages[s].width, stages[s].width, i == 0 ? 2 : 1,
                                       stages[s].group_width, design_.se_ratio(), norm));
    }
    trunk_output_->push_back(std::move(stage_name), stage);
    in = stages[s].width;
  }
  register_module("trunk_output", trunk_output_);
  fc_ = register_module("fc", nn::Linear(in, options_.num_classes()));

  // torchvision: convolutions normal(0, sqrt(2 / fan_out)) with their biases (squeeze-excitation's)
  // left as PyTorch makes them, norms 1 and 0, the linear layer normal(0, 0.01) with bias 0.
  torch::NoGradGuard no_grad;
  for (const auto& module : modules(/*include_self=*/false)) {
    if (auto* conv = module->as<nn::Conv2d>()) {
      const auto& kernel = conv->options.kernel_size();
      const auto fan_out = static_cast<double>((*kernel)[0] * (*kernel)[1] * conv->options.out_channels());
      conv->weight.normal_(0, std::sqrt(2.0 / fan_out));
    }
  }
  fc_->weight.normal_(0, 0.01);
  fc_->bias.zero_();
}

torch::Tensor RegNetImpl::forward(const torch::Tensor& images) {
  auto x = trunk_output_(stem_(images));
  return fc_(torch::adaptive_avg_pool2d(x, {1, 1}).flatten(1));
}

RegNet regnet(const std::string& name, const ClassifierOptions& options) {
  // torchvision's parameters for each model: depth, w_0, w_a, w_m, group width (SE 0.25 for Y).
  static const std::map<std::string, RegNetDesign> designs = [] {
    auto design = [](int64_t depth, int64_t w_0, double w_a, double w_m, int64_t group_width, double se_ratio) {
      return RegNetDesign().depth(depth).w_0(w_0).w_a(w_a).w_m(w_m).group_width(group_width).se_ratio(se_ratio);
    };
    return std::map<std::string, RegNetDesign>{
        {"y_400mf", design(16, 48, 27.89, 2.09, 8, 0.25)},     {"y_800mf", design(14, 56, 38.84, 2.4, 16, 0.25)},
        {"y_1_6gf", design(27, 48, 20.71, 2.65, 24, 0.25)},    {"y_3_2gf", design(21, 80, 42.63, 2.66, 24, 0.25)},
        {"y_8gf", design(17, 192, 76.82, 2.19, 56, 0.25)},     {"y_16gf", design(18, 200, 106.23, 2.48, 112, 0.25)},
        {"y_32gf", design(20, 232, 115.89, 2.53, 232, 0.25)},  {"y_128gf", design(27, 456, 160.83, 2.52, 264, 0.25)},
        {"x_400mf", design(22, 24, 24.48, 2.54, 16, 0)},       {"x_800mf", design(16, 56, 35.73, 2.28, 16, 0)},
        {"x_1_6gf", design(18, 80, 34.01, 2.25, 24, 0)},       {"x_3_2gf", design(25, 88, 26.31, 2.25, 48, 0)},
        {"x_8gf", design(23, 80, 49.56, 2.88, 120, 0)},        {"x_16gf", design(22, 216, 55.59, 2.1, 128, 0)},
        {"x_32gf", design(23, 320, 69.86, 2.0, 168, 0)},
    };
  }();
  auto found = designs.find(name);
  DPT_CHECK(found != designs.end(), ConfigError, "no RegNet named '", name, "'");
  return RegNet(found->second, options);
}

}  // namespace dpt::models
