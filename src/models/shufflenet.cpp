#include "dptrain/models/shufflenet.h"

#include <map>

#include <torch/nn/modules/conv.h>

#include "dptrain/common/error.h"
#include "dptrain/models/layers.h"

namespace dpt::models {

namespace nn = torch::nn;

namespace {


// The unit of the paper's figure 3 (c) at stride 1 and (d) at stride 2: at stride 1 half the
// channels pass through and branch2 transforms the other half; at stride 2 both branches see
// the whole input. The halves are concatenated and shuffled across two groups.
class ShuffleUnitImpl : public nn::Cloneable<ShuffleUnitImpl> {
 public:
  ShuffleUnitImpl(int64_t in, int64_t out, int64_t stride, NormLayer norm_layer)
      : in_(in), out_(out), stride_(stride), norm_layer_(std::move(norm_layer)) {
    reset();
  }
  void reset() override {
    const int64_t half = out_ / 2;
    auto norm = [this](int64_t channels) { return make_norm(norm_layer_, channels); };
    branch1_ = nn::Sequential();
    if (stride_ > 1) {
      branch1_ = nn::Sequential(conv_before_norm(in_, in_, 3, stride_, in_), norm(in_), conv_before_norm(in_, half, 1), norm(half),
                                relu_inplace());
    }
    register_module("branch1", branch1_);
    branch2_ = register_module(
        "branch2", nn::Sequential(conv_before_norm(stride_ > 1 ? in_ : half, half, 1), norm(half),
                                  relu_inplace(), conv_before_norm(half, half, 3, stride_, half), norm(half),
                                  conv_before_norm(half, half, 1), norm(half), relu_inplace()));
  }
  torch::Tensor forward(const torch::Tensor& x) {
    torch::Tensor out;
    if (stride_ == 1) {
      auto halves = x.chunk(2, 1);
      out = torch::cat({halves[0], branch2_->forward(halves[1])}, 1);
    } else {
      out = torch::cat({branch1_->forward(x), branch2_->forward(x)}, 1);
    }
    const int64_t n = out.size(0), c = out.size(1), h = out.size(2), w = out.size(3);
    return out.view({n, 2, c / 2, h, w}).transpose(1, 2).contiguous().view({n, c, h, w});
  }

 private:
  int64_t in_, out_, stride_;
  NormLayer norm_layer_;
  nn::Sequential branch1_{nullptr}, branch2_{nullptr};
};
TORCH_MODULE(ShuffleUnit);

}  // namespace

ShuffleNetV2Impl::ShuffleNetV2Impl(std::vector<int64_t> stage_channels_, ClassifierOptions options_)
    : stage_channels(std::move(stage_channels_)), options(std::move(options_)) {
  reset();
}

void ShuffleNetV2Impl::reset() {
  DPT_CHECK(stage_channels.size() == 5, ConfigError, "ShuffleNetV2 takes 5 channel counts, got ",
            stage_channels.size());
  const auto& norm_layer = options.norm_layer();
  int64_t in = stage_channels[0];
  conv1_ = register_module(
      "conv1", nn::Sequential(conv_before_norm(3, in, 3, 2), make_norm(norm_layer, in), relu_inplace()));
  const std::vector<int64_t> repeats = {4, 8, 4};
  stages_.clear();
  for (size_t i = 0; i < repeats.size(); ++i) {
    const int64_t out = stage_channels[i + 1];
    nn::Sequential stage(ShuffleUnit(in, out, 2, norm_layer));
    for (int64_t r = 1; r < repeats[i]; ++r) stage->push_back(ShuffleUnit(out, out, 1, norm_layer));
    stages_.push_back(register_module("stage" + std::to_string(i + 2), stage));
    in = out;
  }
  const int64_t last = stage_channels[4];
  conv5_ = register_module(
      "conv5", nn::Sequential(conv_before_norm(in, last, 1), make_norm(norm_layer, last), relu_inplace()));
  fc_ = register_module("fc", nn::Linear(last, options.num_classes()));
}

torch::Tensor ShuffleNetV2Impl::forward(const torch::Tensor& images) {
  auto x = torch::max_pool2d(conv1_->forward(images), {3, 3}, {2, 2}, {1, 1});
  for (auto& stage : stages_) x = stage->forward(x);
  return fc_(conv5_->forward(x).mean({2, 3}));
}

ShuffleNetV2 shufflenet_v2(const std::string& width, const ClassifierOptions& options) {
  static const std::map<std::string, std::vector<int64_t>> widths = {{"0_5", {24, 48, 96, 192, 1024}},
                                                                     {"1_0", {24, 116, 232, 464, 1024}},
                                                                     {"1_5", {24, 176, 352, 704, 1024}},
                                                                     {"2_0", {24, 244, 488, 976, 2048}}};
  auto found = widths.find(width);
  DPT_CHECK(found != widths.end(), ConfigError, "ShuffleNetV2 has widths 0_5, 1_0, 1_5 and 2_0, not ", width);
  return ShuffleNetV2(found->second, options);
}

}  // namespace dpt::models
