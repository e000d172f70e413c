#include "dptrain/models/inception.h"

#include <utility>

#include <torch/nn/modules/conv.h>
#include <torch/nn/modules/dropout.h>
#include <torch/nn/modules/linear.h>
#include <torch/nn/modules/pooling.h>

#include "dptrain/common/error.h"

namespace dpt::models {

namespace nn = torch::nn;

namespace {

// A convolution's shape; kernels and paddings may be rectangular (Inception v3's 1x7 and 7x1).
struct ConvShape {
  int64_t in, out, kernel_h, kernel_w = 0;  // kernel_w 0: square
  int64_t stride = 1, pad_h = 0, pad_w = -1;  // pad_w -1: pad_h
};

// torchvision's BasicConv2d: conv (no bias), bn (eps 1e-3), ReLU.
Stack basic_conv(const ConvShape& c, const NormLayer& norm) {
  const int64_t kernel_w = c.kernel_w > 0 ? c.kernel_w : c.kernel_h;
  const int64_t pad_w = c.pad_w >= 0 ? c.pad_w : c.pad_h;
  Stack layer;
  layer->push_back("conv", nn::Conv2d(nn::Conv2dOptions(c.in, c.out, {c.kernel_h, kernel_w})
                                          .stride(c.stride)
                                          .padding({c.pad_h, pad_w})
                                          .bias(false)));
  layer->push_back("bn", make_norm(batch_norm(norm, 1e-3), c.out));
  layer->push_back("relu", relu_inplace());
  return layer;
}

// What a path of an Inception block does to the block's input before its convolutions.
enum class Pool { None, Average3x3, Max3x3Stride2 };

// One parallel path of an Inception block: a pooling, named stages in sequence, then optionally
// named stages in parallel whose outputs are concatenated (Inception v3's E blocks).
struct Path {
  Pool pool = Pool::None;
  std::vector<std::pair<std::string, Stack>> steps;
  std::vector<std::pair<std::string, Stack>> fork = {};
};

// An Inception block: its paths' outputs concatenated along the channels. Children are registered
// path by path, which is torchvision's order in every block type.
class InceptionBlockImpl : public nn::Cloneable<InceptionBlockImpl> {
 public:
  explicit InceptionBlockImpl(std::function<std::vector<Path>()> build) : build_(std::move(build)) { reset(); }

  void reset() override {
    paths_ = build_();
    for (auto& path : paths_) {
      for (auto& [name, stage] : path.steps) register_module(name, stage);
      for (auto& [name, stage] : path.fork) register_module(name, stage);
    }
  }

  torch::Tensor forward(const torch::Tensor& x) {
    std::vector<torch::Tensor> outputs;
    for (auto& path : paths_) {
      auto y = path.pool == Pool::Average3x3     ? torch::avg_pool2d(x, {3, 3}, {1, 1}, {1, 1})
               : path.pool == Pool::Max3x3Stride2 ? torch::max_pool2d(x, {3, 3}, {2, 2})
                                                  : x;
      for (auto& [name, stage] : path.steps) y = stage(y);
      if (!path.fork.empty()) {
        std::vector<torch::Tensor> forks;
        for (auto& [name, stage] : path.fork) forks.push_back(stage(y));
        y = torch::cat(forks, 1);
      }
      outputs.push_back(y);
    }
    return torch::cat(outputs, 1);
  }

 private:
  std::function<std::vector<Path>()> build_;
  std::vector<Path> paths_;
};
TORCH_MODULE(InceptionBlock);

// GoogLeNet's Inception module: 1x1; 1x1 then 3x3; 1x1 then 3x3 (torchvision's, where the paper
// has 5x5); 3x3 max-pool then 1x1.
InceptionBlock googlenet_block(int64_t in, int64_t ch1x1, int64_t ch3x3_reduce, int64_t ch3x3, int64_t ch5x5_reduce,
                               int64_t ch5x5, int64_t pool_proj, const NormLayer& norm) {
  return InceptionBlock([=] {
    return std::vector<Path>{
        {Pool::None, {{"branch1", basic_conv({in, ch1x1, 1}, norm)}}},
        {Pool::None,
         {{"branch2", Stack(basic_conv({in, ch3x3_reduce, 1}, norm),
                            basic_conv({ch3x3_reduce, ch3x3, 3, 0, 1, 1}, norm))}}},
        {Pool::None,
         {{"branch3", Stack(basic_conv({in, ch5x5_reduce, 1}, norm),
                            basic_conv({ch5x5_reduce, ch5x5, 3, 0, 1, 1}, norm))}}},
        {Pool::None, {{"branch4", Stack(max_pool(3, 1, true, 1), basic_conv({in, pool_proj, 1}, norm))}}},
    };
  });
}

// Inception v3's blocks (torchvision's InceptionA to InceptionE), named as there.
InceptionBlock inception_a(int64_t in, int64_t pool_features, const NormLayer& norm) {
  return InceptionBlock([=] {
    return std::vector<Path>{
        {Pool::None, {{"branch1x1", basic_conv({in, 64, 1}, norm)}}},
        {Pool::None,
         {{"branch5x5_1", basic_conv({in, 48, 1}, norm)}, {"branch5x5_2", basic_conv({48, 64, 5, 0, 1, 2}, norm)}}},
        {Pool::None,
         {{"branch3x3dbl_1", basic_conv({in, 64, 1}, norm)},
          {"branch3x3dbl_2", basic_conv({64, 96, 3, 0, 1, 1}, norm)},
          {"branch3x3dbl_3", basic_conv({96, 96, 3, 0, 1, 1}, norm)}}},
        {Pool::Average3x3, {{"branch_pool", basic_conv({in, pool_features, 1}, norm)}}},
    };
  });
}

InceptionBlock inception_b(int64_t in, const NormLayer& norm) {
  return InceptionBlock([=] {
    return std::vector<Path>{
        {Pool::None, {{"branch3x3", basic_conv({in, 384, 3, 0, 2}, norm)}}},
        {Pool::None,
         {{"branch3x3dbl_1", basic_conv({in, 64, 1}, norm)},
          {"branch3x3dbl_2", basic_conv({64, 96, 3, 0, 1, 1}, norm)},
          {"branch3x3dbl_3", basic_conv({96, 96, 3, 0, 2}, norm)}}},
        {Pool::Max3x3Stride2, {}},
    };
  });
}

InceptionBlock inception_c(int64_t in, int64_t c7, const NormLayer& norm) {
  // 1x7 and 7x1 convolutions that keep the size.
  auto wide = [&](int64_t i, int64_t o) { return basic_conv({i, o, 1, 7, 1, 0, 3}, norm); };
  auto tall = [&](int64_t i, int64_t o) { return basic_conv({i, o, 7, 1, 1, 3, 0}, norm); };
  return InceptionBlock([=] {
    return std::vector<Path>{
        {Pool::None, {{"branch1x1", basic_conv({in, 192, 1}, norm)}}},
        {Pool::None,
         {{"branch7x7_1", basic_conv({in, c7, 1}, norm)}, {"branch7x7_2", wide(c7, c7)}, {"branch7x7_3", tall(c7, 192)}}},
        {Pool::None,
         {{"branch7x7dbl_1", basic_conv({in, c7, 1}, norm)},
          {"branch7x7dbl_2", tall(c7, c7)},
          {"branch7x7dbl_3", wide(c7, c7)},
          {"branch7x7dbl_4", tall(c7, c7)},
          {"branch7x7dbl_5", wide(c7, 192)}}},
        {Pool::Average3x3, {{"branch_pool", basic_conv({in, 192, 1}, norm)}}},
    };
  });
}

InceptionBlock inception_d(int64_t in, const NormLayer& norm) {
  return InceptionBlock([=] {
    return std::vector<Path>{
        {Pool::None,
         {{"branch3x3_1", basic_conv({in, 192, 1}, norm)}, {"branch3x3_2", basic_conv({192, 320, 3, 0, 2}, norm)}}},
        {Pool::None,
         {{"branch7x7x3_1", basic_conv({in, 192, 1}, norm)},
          {"branch7x7x3_2", basic_conv({192, 192, 1, 7, 1, 0, 3}, norm)},
          {"branch7x7x3_3", basic_conv({192, 192, 7, 1, 1, 3, 0}, norm)},
          {"branch7x7x3_4", basic_conv({192, 192, 3, 0, 2}, norm)}}},
        {Pool::Max3x3Stride2, {}},
    };
  });
}

InceptionBlock inception_e(int64_t in, const NormLayer& norm) {
  // A 1x3 and a 3x1 convolution side by side, concatenated.
  auto split = [&](const std::string& prefix) {
    return std::vector<std::pair<std::string, Stack>>{{prefix + "a", basic_conv({384, 384, 1, 3, 1, 0, 1}, norm)},
                                                      {prefix + "b", basic_conv({384, 384, 3, 1, 1, 1, 0}, norm)}};
  };
  return InceptionBlock([=] {
    return std::vector<Path>{
        {Pool::None, {{"branch1x1", basic_conv({in, 320, 1}, norm)}}},
        {Pool::None, {{"branch3x3_1", basic_conv({in, 384, 1}, norm)}}, split("branch3x3_2")},
        {Pool::None,
         {{"branch3x3dbl_1", basic_conv({in, 448, 1}, norm)}, {"branch3x3dbl_2", basic_conv({448, 384, 3, 0, 1, 1}, norm)}},
         split("branch3x3dbl_3")},
        {Pool::Average3x3, {{"branch_pool", basic_conv({in, 192, 1}, norm)}}},
    };
  });
}

// Global average pooling and flattening, registered as torchvision's `avgpool`.
Stack pool_and_flatten() { return Stack(GlobalAvgPool(), Flatten()); }

InceptionPart stage(std::string name, nn::AnyModule module) { return {std::move(name), std::move(module), "", 0}; }

}  // namespace

InceptionNetworkImpl::InceptionNetworkImpl(std::string family, std::function<std::vector<InceptionPart>()> build)
    : family_(std::move(family)), build_(std::move(build)) {
  reset();
}

void InceptionNetworkImpl::reset() {
  parts_ = build_();
  for (auto& part : parts_) register_module(part.name, part.module.ptr());
}

torch::Tensor InceptionNetworkImpl::forward(const torch::Tensor& images) {
  auxiliary_.clear();
  auto x = images;
  for (auto& part : parts_) {
    if (!part.head_after.empty()) continue;
    x = part.module.forward(x);
    if (!is_training()) continue;
    for (auto& head : parts_) {
      if (head.head_after == part.name) auxiliary_.push_back({head.module.forward(x), head.loss_weight});
    }
  }
  return x;
}

std::vector<AuxiliaryLogits> InceptionNetworkImpl::take_auxiliary_logits() {
  return std::exchange(auxiliary_, {});
}

void drop_auxiliary_heads(StateDict& weights) {
  std::vector<std::string> heads;
  for (const auto& entry : weights) {
    const auto& key = entry.key();
    if (key.rfind("aux1.", 0) == 0 || key.rfind("aux2.", 0) == 0 || key.rfind("AuxLogits.", 0) == 0) {
      heads.push_back(key);
    }
  }
  for (const auto& key : heads) weights.erase(key);
}

InceptionNetwork googlenet(const ClassifierOptions& options) {
  return InceptionNetwork("GoogLeNet", [options] {
    const auto& norm = options.norm_layer();
    const int64_t classes = options.num_classes();
    // "0 turns every dropout off" reaches the heads' 0.7 too.
    const double head_dropout = options.dropout() == 0.0 ? 0.0 : 0.7;
    auto head = [&](std::string name, int64_t in, std::string after) {
      Stack aux;
      aux->push_back("pool", nn::AdaptiveAvgPool2d(nn::AdaptiveAvgPool2dOptions(4)));
      aux->push_back("conv", basic_conv({in, 128, 1}, norm));
      aux->push_back("flatten", Flatten());
      aux->push_back("fc1", nn::Linear(2048, 1024));
      aux->push_back("relu", relu_inplace());
      aux->push_back("dropout", nn::Dropout(nn::DropoutOptions(head_dropout)));
      aux->push_back("fc2", nn::Linear(1024, classes));
      return InceptionPart{std::move(name), nn::AnyModule(aux), std::move(after), 0.3};
    };
    std::vector<InceptionPart> parts = {
        stage("conv1", nn::AnyModule(basic_conv({3, 64, 7, 0, 2, 3}, norm))),
        stage("maxpool1", nn::AnyModule(max_pool(3, 2, true))),
        stage("conv2", nn::AnyModule(basic_conv({64, 64, 1}, norm))),
        stage("conv3", nn::AnyModule(basic_conv({64, 192, 3, 0, 1, 1}, norm))),
        stage("maxpool2", nn::AnyModule(max_pool(3, 2, true))),
        stage("inception3a", nn::AnyModule(googlenet_block(192, 64, 96, 128, 16, 32, 32, norm))),
        stage("inception3b", nn::AnyModule(googlenet_block(256, 128, 128, 192, 32, 96, 64, norm))),
        stage("maxpool3", nn::AnyModule(max_pool(3, 2, true))),
        stage("inception4a", nn::AnyModule(googlenet_block(480, 192, 96, 208, 16, 48, 64, norm))),
        stage("inception4b", nn::AnyModule(googlenet_block(512, 160, 112, 224, 24, 64, 64, norm))),
        stage("inception4c", nn::AnyModule(googlenet_block(512, 128, 128, 256, 24, 64, 64, norm))),
        stage("inception4d", nn::AnyModule(googlenet_block(512, 112, 144, 288, 32, 64, 64, norm))),
        stage("inception4e", nn::AnyModule(googlenet_block(528, 256, 160, 320, 32, 128, 128, norm))),
        stage("maxpool4", nn::AnyModule(max_pool(2, 2, true))),
        stage("inception5a", nn::AnyModule(googlenet_block(832, 256, 160, 320, 32, 128, 128, norm))),
        stage("inception5b", nn::AnyModule(googlenet_block(832, 384, 192, 384, 48, 128, 128, norm))),
    };
    if (options.aux_logits()) {
      parts.push_back(head("aux1", 512, "inception4a"));
      parts.push_back(head("aux2", 528, "inception4d"));
    }
    parts.push_back(stage("avgpool", nn::AnyModule(pool_and_flatten())));
    parts.push_back(stage("dropout", nn::AnyModule(nn::Dropout(nn::DropoutOptions(dropout_or(options, 0.2))))));
    parts.push_back(stage("fc", nn::AnyModule(nn::Linear(1024, classes))));
    // torchvision: biases as PyTorch makes them, batch norms 1 and 0 (their own reset()).
    for (auto& part : parts) init_truncated_normal(*part.module.ptr(), 0.01, /*zero_biases=*/false);
    return parts;
  });
}

InceptionNetwork inception_v3(const ClassifierOptions& options) {
  // The head's 5x5 convolution needs Mixed_6e's output at 17x17 or more.
  constexpr int64_t kAuxMinimumSize = 299;
  DPT_CHECK(!options.aux_logits() || options.image_size().value_or(kAuxMinimumSize) >= kAuxMinimumSize, ConfigError,
            "inception_v3's auxiliary classifier needs images of at least ", kAuxMinimumSize, " px, got ",
            *options.image_size(), "; train at ", kAuxMinimumSize, " px or more, or without it (aux_logits off: ",
            "dptrain train --no-aux-logits)");
  return InceptionNetwork("Inception v3", [options] {
    const auto& norm = options.norm_layer();
    const int64_t classes = options.num_classes();
    std::vector<InceptionPart> parts = {
        stage("Conv2d_1a_3x3", nn::AnyModule(basic_conv({3, 32, 3, 0, 2}, norm))),
        stage("Conv2d_2a_3x3", nn::AnyModule(basic_conv({32, 32, 3}, norm))),
        stage("Conv2d_2b_3x3", nn::AnyModule(basic_conv({32, 64, 3, 0, 1, 1}, norm))),
        stage("maxpool1", nn::AnyModule(max_pool(3, 2))),
        stage("Conv2d_3b_1x1", nn::AnyModule(basic_conv({64, 80, 1}, norm))),
        stage("Conv2d_4a_3x3", nn::AnyModule(basic_conv({80, 192, 3}, norm))),
        stage("maxpool2", nn::AnyModule(max_pool(3, 2))),
        stage("Mixed_5b", nn::AnyModule(inception_a(192, 32, norm))),
        stage("Mixed_5c", nn::AnyModule(inception_a(256, 64, norm))),
        stage("Mixed_5d", nn::AnyModule(inception_a(288, 64, norm))),
        stage("Mixed_6a", nn::AnyModule(inception_b(288, norm))),
        stage("Mixed_6b", nn::AnyModule(inception_c(768, 128, norm))),
        stage("Mixed_6c", nn::AnyModule(inception_c(768, 160, norm))),
        stage("Mixed_6d", nn::AnyModule(inception_c(768, 160, norm))),
        stage("Mixed_6e", nn::AnyModule(inception_c(768, 192, norm))),
    };
    nn::Linear head_fc(768, classes);
    if (options.aux_logits()) {
      Stack aux;
      aux->push_back("pool", nn::AvgPool2d(nn::AvgPool2dOptions(5).stride(3)));
      aux->push_back("conv0", basic_conv({768, 128, 1}, norm));
      aux->push_back("conv1", basic_conv({128, 768, 5}, norm));
      aux->push_back("avgpool", pool_and_flatten());
      aux->push_back("fc", head_fc);
      parts.push_back({"AuxLogits", nn::AnyModule(aux), "Mixed_6e", 0.4});
    }
    parts.push_back(stage("Mixed_7a", nn::AnyModule(inception_d(768, norm))));
    parts.push_back(stage("Mixed_7b", nn::AnyModule(inception_e(1280, norm))));
    parts.push_back(stage("Mixed_7c", nn::AnyModule(inception_e(2048, norm))));
    parts.push_back(stage("avgpool", nn::AnyModule(pool_and_flatten())));
    parts.push_back(stage("dropout", nn::AnyModule(nn::Dropout(nn::DropoutOptions(dropout_or(options, 0.5))))));
    parts.push_back(stage("fc", nn::AnyModule(nn::Linear(2048, classes))));
    for (auto& part : parts) init_truncated_normal(*part.module.ptr(), 0.1, /*zero_biases=*/false);
    // torchvision gives the head's classifier std 0.001 (its conv1's 0.01 is set on the
    // BasicConv2d, not on the convolution it initialises, so 0.1 applies there).
    trunc_normal_(head_fc->weight, 0.001);
    return parts;
  });
}

}  // namespace dpt::models
