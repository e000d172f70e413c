#include "dptrain/models/registry.h"

#include <tuple>
#include <utility>

#include <torch/nn/modules/container/any.h>

#include "dptrain/common/error.h"
#include "dptrain/common/text.h"
#include "dptrain/models/classic.h"
#include "dptrain/models/convnext.h"
#include "dptrain/models/densenet.h"
#include "dptrain/models/efficientnet.h"
#include "dptrain/models/ghostnet.h"
#include "dptrain/models/inception.h"
#include "dptrain/models/mobilenet.h"
#include "dptrain/models/regnet.h"
#include "dptrain/models/resnet.h"
#include "dptrain/models/shufflenet.h"
#include "dptrain/models/torchscript.h"
#include "dptrain/models/vit.h"

namespace dpt::models {
namespace {

struct Entry {
  ModelInfo info;
  NetworkBuilder build;
};

// torchvision's ResNet options from the common ones.
ResNetOptions resnet_options(const ClassifierOptions& o) {
  return ResNetOptions().num_classes(o.num_classes()).zero_init_residual(o.zero_init_residual()).norm_layer(o.norm_layer());
}

// The builder of the network `make` makes from the common options.
template <typename Make>
NetworkBuilder network(Make make) {
  return [make](const ClassifierOptions& o) { return torch::nn::AnyModule(make(o)); };
}

// The builder of one of resnet.h's ResNets.
NetworkBuilder resnet(ResNet (*make)(const ResNetOptions&)) {
  return network([make](const ClassifierOptions& o) { return make(resnet_options(o)); });
}

// One entry per name. The evaluation transforms are those of torchvision 0.14's default weights
// (`torchvision.models.get_model_weights(name).DEFAULT.transforms()`).
const std::vector<Entry>& entries() {
  using I = data::Interpolation;
  auto info = [](std::string name, std::string family, int64_t crop = 224, int64_t resize = 256,
                 I interpolation = I::Bilinear, bool half = false) {
    return ModelInfo{std::move(name), std::move(family), crop, resize, interpolation, half};
  };
  static const std::vector<Entry> table = [&] {
    std::vector<Entry> t = {
        {info("alexnet", "AlexNet"), network(alexnet)},
        {info("resnet18", "ResNet"), resnet(resnet18)},
        {info("resnet34", "ResNet"), resnet(resnet34)},
        {info("resnet50", "ResNet", 224, 232), resnet(resnet50)},
        {info("resnet101", "ResNet", 224, 232), resnet(resnet101)},
        {info("resnet152", "ResNet", 224, 232), resnet(resnet152)},
        {info("resnext50_32x4d", "ResNeXt", 224, 232), resnet(resnext50_32x4d)},
        {info("resnext101_32x8d", "ResNeXt", 224, 232), resnet(resnext101_32x8d)},
        {info("resnext101_64x4d", "ResNeXt", 224, 232), resnet(resnext101_64x4d)},
        {info("wide_resnet50_2", "Wide ResNet", 224, 232), resnet(wide_resnet50_2)},
        {info("wide_resnet101_2", "Wide ResNet", 224, 232), resnet(wide_resnet101_2)},
        {info("resnet20", "CIFAR ResNet", 32, 32), resnet(resnet20)},
        {info("resnet56", "CIFAR ResNet", 32, 32), resnet(resnet56)},
        {info("googlenet", "GoogLeNet"), network(googlenet)},
        // Not torchvision's: the GhostNet authors' reference model and its ImageNet evaluation.
        {info("ghostnet", "GhostNet"), network([](const ClassifierOptions& o) { return ghostnet(1.0, o); })},
        {info("inception_v3", "Inception v3", 299, 342), network(inception_v3)},
        {info("squeezenet1_0", "SqueezeNet"), network([](const ClassifierOptions& o) { return squeezenet("1_0", o); })},
        {info("squeezenet1_1", "SqueezeNet"), network([](const ClassifierOptions& o) { return squeezenet("1_1", o); })},
        {info("mobilenet_v2", "MobileNetV2", 224, 232),
         network([](const ClassifierOptions& o) { return mobilenet_v2(o); })},
        {info("mobilenet_v3_small", "MobileNetV3"),
         network([](const ClassifierOptions& o) { return mobilenet_v3("small", o); })},
        {info("mobilenet_v3_large", "MobileNetV3", 224, 232),
         network([](const ClassifierOptions& o) { return mobilenet_v3("large", o); })},
    };
    for (const auto& [width, resize] : std::vector<std::pair<std::string, int64_t>>{
             {"0_5", 256}, {"1_0", 256}, {"1_5", 232}, {"2_0", 232}}) {
      t.push_back({info("shufflenet_v2_x" + width, "ShuffleNetV2", 224, resize),
                   network([width = width](const ClassifierOptions& o) { return shufflenet_v2(width, o); })});
    }
    for (int depth : {121, 161, 169, 201}) {
      t.push_back({info("densenet" + std::to_string(depth), "DenseNet"),
                   network([depth](const ClassifierOptions& o) { return densenet(depth, o); })});
    }
    for (const std::string size : {"400mf", "800mf", "1_6gf", "3_2gf", "8gf", "16gf", "32gf", "128gf"}) {
      for (const std::string kind : {"x", "y"}) {
        if (kind == "x" && size == "128gf") continue;  // torchvision has no RegNetX-128GF
        const bool swag = size == "128gf";  // its only weights are SWAG's, fine-tuned at 384 px
        t.push_back({info("regnet_" + kind + "_" + size, "RegNet", swag ? 384 : 224, swag ? 384 : 232,
                          swag ? I::Bicubic : I::Bilinear),
                     network([name = kind + "_" + size](const ClassifierOptions& o) { return regnet(name, o); })});
      }
    }
    for (const auto& [size, resize] : std::vector<std::pair<std::string, int64_t>>{
             {"tiny", 236}, {"small", 230}, {"base", 232}, {"large", 232}}) {
      t.push_back({info("convnext_" + size, "ConvNeXt", 224, resize),
                   network([size = size](const ClassifierOptions& o) { return convnext(size, o); })});
    }
    for (int depth : {11, 13, 16, 19}) {
      for (bool bn : {false, true}) {
        t.push_back({info("vgg" + std::to_string(depth) + (bn ? "_bn" : ""), "VGG"),
                     network([depth, bn](const ClassifierOptions& o) { return vgg(depth, bn, o); })});
      }
    }
    const std::vector<std::tuple<std::string, int64_t, int64_t, I, bool>> efficientnets = {
        {"b0", 224, 256, I::Bicubic, false},  {"b1", 240, 255, I::Bilinear, false}, {"b2", 288, 288, I::Bicubic, false},
        {"b3", 300, 320, I::Bicubic, false},  {"b4", 380, 384, I::Bicubic, false},  {"b5", 456, 456, I::Bicubic, false},
        {"b6", 528, 528, I::Bicubic, false},  {"b7", 600, 600, I::Bicubic, false},  {"v2_s", 384, 384, I::Bilinear, false},
        {"v2_m", 480, 480, I::Bilinear, false}, {"v2_l", 480, 480, I::Bicubic, true}};
    for (const auto& [variant, crop, resize, interpolation, half] : efficientnets) {
      t.push_back({info("efficientnet_" + variant, "EfficientNet", crop, resize, interpolation, half),
                   network([variant = variant](const ClassifierOptions& o) { return efficientnet(variant, o); })});
    }
    const std::vector<std::tuple<std::string, ViTLayout, int64_t, int64_t, I>> vits = {
        {"vit_b_16", ViTLayout::b16(), 224, 256, I::Bilinear}, {"vit_b_32", ViTLayout::b32(), 224, 256, I::Bilinear},
        {"vit_l_16", ViTLayout::l16(), 224, 242, I::Bilinear}, {"vit_l_32", ViTLayout::l32(), 224, 256, I::Bilinear},
        {"vit_h_14", ViTLayout::h14(), 518, 518, I::Bicubic},
        // Not in torchvision's registry: torchvision.models.VisionTransformer(224, 16, 12, 3, 192, 768)
        // and (224, 16, 12, 6, 384, 1536) in Python, with DeiT's evaluation transform.
        {"vit_ti_16", ViTLayout::ti16(), 224, 256, I::Bicubic}, {"vit_s_16", ViTLayout::s16(), 224, 256, I::Bicubic}};
    for (const auto& [name, layout, crop, resize, interpolation] : vits) {
      t.push_back({info(name, "Vision Transformer", crop, resize, interpolation),
                   network([layout = layout, crop = crop](const ClassifierOptions& o) {
                     auto sized = o;
                     if (!sized.image_size()) sized.image_size(crop);
                     return vision_transformer(layout, sized);
                   })});
    }
    return t;
  }();
  return table;
}

bool is_torchscript(const std::string& name) { return name.rfind(kTorchScriptPrefix, 0) == 0; }

const Entry* find(const std::string& name) {
  for (const auto& entry : entries()) {
    if (entry.info.name == name) return &entry;
  }
  return nullptr;
}

[[noreturn]] void unknown(const std::string& name) {
  throw ConfigError(str("unknown model architecture '", name, "'; choose one of: ", join(names(), ", "), ", or ",
                        kTorchScriptPrefix, "PATH for a module saved with torch.jit.script or torch.jit.trace"));
}

// A scripted model's classifier is its own: one forward of a black image (eval mode, no grad)
// checks it yields num_classes logits, so a mismatch is reported here and not as a loss error.
void check_scripted_outputs(Classifier& model, const std::string& name, const ClassifierOptions& options) {
  const int64_t side = options.image_size().value_or(224);
  torch::NoGradGuard no_grad;
  model->eval();
  torch::Tensor logits;
  try {
    logits = model(torch::zeros({1, 3, side, side}));
  } catch (const c10::Error& error) {
    throw ConfigError(str(name, " fails on a ", side, "x", side, " image: ", error.what_without_backtrace(),
                          "; pick the image size it expects (--image-size)"));
  }
  model->train();
  DPT_CHECK(logits.dim() == 2 && logits.size(1) == options.num_classes(), ConfigError, name, " outputs ",
            logits.sizes(), " for one image, but the data has ", options.num_classes(),
            " classes; give the scripted model a classifier with ", options.num_classes(), " outputs");
}

}  // namespace

Classifier create(const std::string& name, const ClassifierOptions& options) {
  if (is_torchscript(name)) {
    const std::string path = name.substr(std::string(kTorchScriptPrefix).size());
    Classifier model(name, network([path](const ClassifierOptions&) { return ScriptedNetwork(path); }), options);
    check_scripted_outputs(model, name, options);
    return model;
  }
  const Entry* entry = find(name);
  if (!entry) unknown(name);
  return Classifier(name, entry->build, options);
}

const std::vector<ModelInfo>& registry() {
  static const std::vector<ModelInfo> infos = [] {
    std::vector<ModelInfo> all;
    for (const auto& entry : entries()) all.push_back(entry.info);
    return all;
  }();
  return infos;
}

std::vector<std::string> names() {
  std::vector<std::string> result;
  for (const auto& entry : entries()) result.push_back(entry.info.name);
  return result;
}

ModelInfo info(const std::string& name) {
  if (is_torchscript(name)) return ModelInfo{name, "TorchScript"};
  const Entry* entry = find(name);
  if (!entry) unknown(name);
  return entry->info;
}

}  // namespace dpt::models
