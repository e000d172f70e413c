#include "dptrain/models/classic.h"

#include <map>
#include <vector>

#include <torch/nn/init.h>
#include <torch/nn/modules/conv.h>
#include <torch/nn/modules/dropout.h>
#include <torch/nn/modules/linear.h>
#include <torch/nn/modules/pooling.h>

#include "dptrain/common/error.h"
#include "dptrain/models/layers.h"

namespace dpt::models {

namespace nn = torch::nn;

namespace {

nn::Conv2d conv(int64_t in, int64_t out, int64_t kernel, int64_t stride = 1, int64_t padding = 0) {
  return nn::Conv2d(nn::Conv2dOptions(in, out, kernel).stride(stride).padding(padding));
}
nn::Dropout dropout(double p) { return nn::Dropout(nn::DropoutOptions(p)); }

// Linear, ReLU, dropout x2, then the output layer: AlexNet's and VGG's classifier (AlexNet puts the
// dropouts first in each pair).
nn::Sequential hidden_linear_classifier(int64_t in, double p, bool dropout_first, int64_t num_classes) {
  nn::Sequential classifier;
  for (int64_t width : {in, int64_t{4096}}) {
    if (dropout_first) classifier->push_back(dropout(p));
    classifier->push_back(nn::Linear(width, 4096));
    classifier->push_back(relu_inplace());
    if (!dropout_first) classifier->push_back(dropout(p));
  }
  classifier->push_back(nn::Linear(4096, num_classes));
  return classifier;
}

// SqueezeNet's Fire module: squeeze 1x1, then 1x1 and 3x3 expansions concatenated.
class FireImpl : public nn::Cloneable<FireImpl> {
 public:
  FireImpl(int64_t in, int64_t squeeze, int64_t expand1x1, int64_t expand3x3)
      : in_(in), squeeze_channels_(squeeze), expand1x1_channels_(expand1x1), expand3x3_channels_(expand3x3) {
    reset();
  }
  void reset() override {
    squeeze_ = register_module("squeeze", conv(in_, squeeze_channels_, 1));
    expand1x1_ = register_module("expand1x1", conv(squeeze_channels_, expand1x1_channels_, 1));
    expand3x3_ = register_module("expand3x3", conv(squeeze_channels_, expand3x3_channels_, 3, 1, 1));
  }
  torch::Tensor forward(const torch::Tensor& x) {
    auto s = torch::relu(squeeze_(x));
    return torch::cat({torch::relu(expand1x1_(s)), torch::relu(expand3x3_(s))}, 1);
  }

 private:
  int64_t in_, squeeze_channels_, expand1x1_channels_, expand3x3_channels_;
  nn::Conv2d squeeze_{nullptr}, expand1x1_{nullptr}, expand3x3_{nullptr};
};
TORCH_MODULE(Fire);

}  // namespace

FeatureNetwork alexnet(const ClassifierOptions& options) {
  return FeatureNetwork("AlexNet", [options] {
    nn::Sequential features(conv(3, 64, 11, 4, 2), relu_inplace(), max_pool(3, 2), conv(64, 192, 5, 1, 2), relu_inplace(),
                            max_pool(3, 2), conv(192, 384, 3, 1, 1), relu_inplace(), conv(384, 256, 3, 1, 1), relu_inplace(),
                            conv(256, 256, 3, 1, 1), relu_inplace(), max_pool(3, 2));
    // torchvision keeps PyTorch's default initialisation for AlexNet.
    return FeatureNetworkParts{
        features, std::array<int64_t, 2>{6, 6},
        hidden_linear_classifier(256 * 6 * 6, dropout_or(options, 0.5), /*dropout_first=*/true, options.num_classes())};
  });
}

FeatureNetwork vgg(int depth, bool batch_norm, const ClassifierOptions& options) {
  // Output channels of each 3x3 convolution; 0 is a 2x2 max-pool.
  static const std::map<int, std::vector<int64_t>> configurations = {
      {11, {64, 0, 128, 0, 256, 256, 0, 512, 512, 0, 512, 512, 0}},
      {13, {64, 64, 0, 128, 128, 0, 256, 256, 0, 512, 512, 0, 512, 512, 0}},
      {16, {64, 64, 0, 128, 128, 0, 256, 256, 256, 0, 512, 512, 512, 0, 512, 512, 512, 0}},
      {19, {64, 64, 0, 128, 128, 0, 256, 256, 256, 256, 0, 512, 512, 512, 512, 0, 512, 512, 512, 512, 0}},
  };
  auto configuration = configurations.find(depth);
  DPT_CHECK(configuration != configurations.end(), ConfigError, "VGG has depths 11, 13, 16 and 19, not ", depth);
  return FeatureNetwork(batch_norm ? "VGG (batch norm)" : "VGG", [layers = configuration->second, batch_norm, options] {
    nn::Sequential features;
    int64_t in = 3;
    for (int64_t out : layers) {
      if (out == 0) {
        features->push_back(max_pool(2, 2));
        continue;
      }
      features->push_back(conv(in, out, 3, 1, 1));
      if (batch_norm) features->push_back(make_norm(options.norm_layer(), out));
      features->push_back(relu_inplace());
      in = out;
    }
    FeatureNetworkParts parts{
        features, std::array<int64_t, 2>{7, 7},
        hidden_linear_classifier(512 * 7 * 7, dropout_or(options, 0.5), /*dropout_first=*/false, options.num_classes())};
    init_like_torchvision(*parts.features, LinearInit::Normal);
    init_like_torchvision(*parts.classifier, LinearInit::Normal);
    return parts;
  });
}

FeatureNetwork squeezenet(const std::string& version, const ClassifierOptions& options) {
  DPT_CHECK(version == "1_0" || version == "1_1", ConfigError, "SqueezeNet has versions 1_0 and 1_1, not ", version);
  return FeatureNetwork("SqueezeNet " + version, [version, options] {
    nn::Sequential features;
    if (version == "1_0") {
      features = nn::Sequential(conv(3, 96, 7, 2), relu_inplace(), max_pool(3, 2, true), Fire(96, 16, 64, 64),
                                Fire(128, 16, 64, 64), Fire(128, 32, 128, 128), max_pool(3, 2, true),
                                Fire(256, 32, 128, 128), Fire(256, 48, 192, 192), Fire(384, 48, 192, 192),
                                Fire(384, 64, 256, 256), max_pool(3, 2, true), Fire(512, 64, 256, 256));
    } else {
      features = nn::Sequential(conv(3, 64, 3, 2), relu_inplace(), max_pool(3, 2, true), Fire(64, 16, 64, 64),
                                Fire(128, 16, 64, 64), max_pool(3, 2, true), Fire(128, 32, 128, 128),
                                Fire(256, 32, 128, 128), max_pool(3, 2, true), Fire(256, 48, 192, 192),
                                Fire(384, 48, 192, 192), Fire(384, 64, 256, 256), Fire(512, 64, 256, 256));
    }
    auto final_conv = conv(512, options.num_classes(), 1);
    // The classifier pools and flattens itself, as torchvision's (which flattens after it).
    nn::Sequential classifier(dropout(dropout_or(options, 0.5)), final_conv, relu_inplace(), GlobalAvgPool(), Flatten());
    torch::NoGradGuard no_grad;
    for (const auto& module : features->modules(/*include_self=*/false)) {
      if (auto* c = module->as<nn::Conv2d>()) {
        nn::init::kaiming_uniform_(c->weight);
        c->bias.zero_();
      }
    }
    final_conv->weight.normal_(0, 0.01);
    final_conv->bias.zero_();
    return FeatureNetworkParts{features, std::nullopt, classifier};
  });
}

}  // namespace dpt::models
