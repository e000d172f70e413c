#include "dptrain/models/vit.h"

#include <cmath>
#include <string>

#include <torch/nn/init.h>
#include <torch/nn/modules/activation.h>
#include <torch/nn/modules/dropout.h>

#include "dptrain/common/error.h"
#include "dptrain/compat/compat.h"
#include "dptrain/models/layers.h"

namespace dpt::models {

namespace nn = torch::nn;

SelfAttentionImpl::SelfAttentionImpl(int64_t embed_dim, int64_t num_heads, double dropout)
    : embed_dim_(embed_dim), num_heads_(num_heads), dropout_(dropout) {
  reset();
}

void SelfAttentionImpl::reset() {
  DPT_CHECK(embed_dim_ % num_heads_ == 0, ConfigError, "attention: ", embed_dim_, " dimensions do not split into ",
            num_heads_, " heads");
  in_proj_weight = register_parameter("in_proj_weight", torch::empty({3 * embed_dim_, embed_dim_}));
  in_proj_bias = register_parameter("in_proj_bias", torch::zeros({3 * embed_dim_}));
  out_proj = register_module("out_proj", nn::Linear(embed_dim_, embed_dim_));
  // PyTorch's MultiheadAttention: Xavier-uniform input projection, zero biases.
  torch::NoGradGuard no_grad;
  nn::init::xavier_uniform_(in_proj_weight);
  out_proj->bias.zero_();
}

torch::Tensor SelfAttentionImpl::forward(const torch::Tensor& x) {
  const int64_t n = x.size(0), length = x.size(1), head_dim = embed_dim_ / num_heads_;
  // [N, L, 3E] -> three [N, heads, L, head_dim]
  auto qkv = torch::linear(x, in_proj_weight, in_proj_bias).view({n, length, 3, num_heads_, head_dim});
  qkv = qkv.permute({2, 0, 3, 1, 4});
  auto attended = compat::scaled_dot_product_attention(qkv[0], qkv[1], qkv[2], is_training() ? dropout_ : 0.0);
  return out_proj(attended.transpose(1, 2).reshape({n, length, embed_dim_}));
}

EncoderBlockImpl::EncoderBlockImpl(const ViTLayout& layout, double dropout) : layout_(layout), dropout_(dropout) {
  reset();
}

void EncoderBlockImpl::reset() {
  const int64_t hidden = layout_.hidden_dim();
  ln_1_ = register_module("ln_1", nn::LayerNorm(nn::LayerNormOptions({hidden}).eps(1e-6)));
  self_attention_ = register_module("self_attention", SelfAttention(hidden, layout_.num_heads()));
  ln_2_ = register_module("ln_2", nn::LayerNorm(nn::LayerNormOptions({hidden}).eps(1e-6)));
  // torchvision's MLPBlock: entries 0 and 3 are the linear layers.
  nn::Linear fc1(hidden, layout_.mlp_dim()), fc2(layout_.mlp_dim(), hidden);
  mlp_ = register_module("mlp", nn::Sequential(fc1, nn::GELU(), nn::Dropout(dropout_), fc2, nn::Dropout(dropout_)));
  torch::NoGradGuard no_grad;
  for (auto& fc : {fc1, fc2}) {
    nn::init::xavier_uniform_(fc->weight);
    fc->bias.normal_(0, 1e-6);
  }
}

torch::Tensor EncoderBlockImpl::forward(const torch::Tensor& input) {
  auto x = self_attention_(ln_1_(input));
  x = torch::dropout(x, dropout_, is_training()) + input;
  return x + mlp_->forward(ln_2_(x));
}

EncoderImpl::EncoderImpl(const ViTLayout& layout, int64_t seq_length, double dropout)
    : layout_(layout), seq_length_(seq_length), dropout_(dropout) {
  reset();
}

void EncoderImpl::reset() {
  pos_embedding = register_parameter("pos_embedding",
                                     torch::empty({1, seq_length_, layout_.hidden_dim()}).normal_(0, 0.02));
  layers_ = Stack();
  for (int64_t i = 0; i < layout_.num_layers(); ++i) {
    layers_->push_back("encoder_layer_" + std::to_string(i), EncoderBlock(layout_, dropout_));
  }
  register_module("layers", layers_);
  ln_ = register_module("ln", nn::LayerNorm(nn::LayerNormOptions({layout_.hidden_dim()}).eps(1e-6)));
}

torch::Tensor EncoderImpl::forward(const torch::Tensor& x) {
  return ln_(layers_->forward(torch::dropout(x + pos_embedding, dropout_, is_training())));
}

VisionTransformerImpl::VisionTransformerImpl(ViTLayout layout_, ClassifierOptions options_)
    : layout(std::move(layout_)), options(std::move(options_)) {
  reset();
}

void VisionTransformerImpl::reset() {
  const int64_t patch = layout.patch_size(), hidden = layout.hidden_dim();
  DPT_CHECK(image_size() % patch == 0, ConfigError, "a ViT with ", patch, "-pixel patches needs an image size that ",
            patch, " divides, got ", image_size());
  const int64_t seq_length = (image_size() / patch) * (image_size() / patch) + 1;
  class_token_ = register_parameter("class_token", torch::zeros({1, 1, hidden}));
  conv_proj_ = register_module("conv_proj", nn::Conv2d(nn::Conv2dOptions(3, hidden, patch).stride(patch)));
  encoder_ = register_module("encoder", Encoder(layout, seq_length, dropout_or(options, 0.0)));
  nn::Linear head(hidden, options.num_classes());
  heads_ = register_module("heads", Stack());
  heads_->push_back("head", head);
  torch::NoGradGuard no_grad;
  trunc_normal_(conv_proj_->weight, std::sqrt(1.0 / static_cast<double>(3 * patch * patch)));
  conv_proj_->bias.zero_();
  // torchvision starts the head at zero.
  head->weight.zero_();
  head->bias.zero_();
}

torch::Tensor VisionTransformerImpl::forward(const torch::Tensor& images) {
  DPT_CHECK(images.dim() == 4 && images.size(2) == image_size() && images.size(3) == image_size(), ConfigError,
            "this ViT was built for ", image_size(), "x", image_size(), " images, got ", images.sizes(),
            "; build it for that size (--image-size)");
  const int64_t n = images.size(0);
  auto x = conv_proj_(images).flatten(2).transpose(1, 2);  // [N, patches, hidden]
  x = torch::cat({class_token_.expand({n, -1, -1}), x}, 1);
  x = encoder_(x);
  return heads_->forward(x.select(1, 0));
}

void VisionTransformerImpl::pretty_print(std::ostream& stream) const {
  stream << "VisionTransformer(patch_size=" << layout.patch_size() << ", layers=" << layout.num_layers()
         << ", image_size=" << image_size() << ")";
}

VisionTransformer vision_transformer(const ViTLayout& layout, const ClassifierOptions& options) {
  return VisionTransformer(layout, options);
}

}  // namespace dpt::models
