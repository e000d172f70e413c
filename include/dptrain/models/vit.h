#pragma once
// Vision Transformers (Dosovitskiy et al. 2020) as torchvision builds them: patches embedded by a
// strided convolution, a class token, learned position embeddings, pre-norm encoder blocks
// (LayerNorm eps 1e-6, multi-head self-attention, GELU MLP), the class token's output to a
// linear head. State-dict names are torchvision's (class_token, conv_proj.*,
// encoder.layers.encoder_layer_N.self_attention.in_proj_weight, heads.head.*).
//
//   auto vit = dpt::models::vision_transformer(dpt::models::ViTLayout::b16(),
//                                              dpt::models::ClassifierOptions().num_classes(10).image_size(32));

#include <cstdint>
#include <ostream>

#include <torch/arg.h>
#include <torch/nn/cloneable.h>
#include <torch/nn/modules/container/sequential.h>
#include <torch/nn/modules/conv.h>
#include <torch/nn/modules/linear.h>
#include <torch/nn/modules/normalization.h>
#include <torch/nn/pimpl.h>

#include "dptrain/models/classifier.h"

namespace dpt::models {

struct ViTLayout {
  // torchvision's sizes: B/16 (the defaults), B/32, L/16, L/32, H/14; and DeiT's Ti/16 and S/16
  // (Touvron et al. 2021), which torchvision's VisionTransformer class builds with these sizes.
  static ViTLayout b16() { return ViTLayout(); }
  static ViTLayout b32() { return ViTLayout().patch_size(32); }
  static ViTLayout l16() { return ViTLayout().num_layers(24).num_heads(16).hidden_dim(1024).mlp_dim(4096); }
  static ViTLayout l32() { return l16().patch_size(32); }
  static ViTLayout h14() { return ViTLayout().patch_size(14).num_layers(32).num_heads(16).hidden_dim(1280).mlp_dim(5120); }
  static ViTLayout ti16() { return ViTLayout().num_heads(3).hidden_dim(192).mlp_dim(768); }
  static ViTLayout s16() { return ViTLayout().num_heads(6).hidden_dim(384).mlp_dim(1536); }

  TORCH_ARG(int64_t, patch_size) = 16;
  TORCH_ARG(int64_t, num_layers) = 12;
  TORCH_ARG(int64_t, num_heads) = 12;
  TORCH_ARG(int64_t, hidden_dim) = 768;
  TORCH_ARG(int64_t, mlp_dim) = 3072;
};

// torch.nn.MultiheadAttention's parameters (in_proj_weight, in_proj_bias, out_proj) for self-
// attention over batch-first [N, L, E] input, as ViT calls it (need_weights=False).
class SelfAttentionImpl : public torch::nn::Cloneable<SelfAttentionImpl> {
 public:
  SelfAttentionImpl(int64_t embed_dim, int64_t num_heads, double dropout = 0);
  void reset() override;
  torch::Tensor forward(const torch::Tensor& x);

  torch::Tensor in_proj_weight, in_proj_bias;
  torch::nn::Linear out_proj{nullptr};

 private:
  int64_t embed_dim_, num_heads_;
  double dropout_;
};
TORCH_MODULE(SelfAttention);

// One pre-norm block: x + dropout(attention(ln_1(x))), then that + mlp(ln_2(that)).
class EncoderBlockImpl : public torch::nn::Cloneable<EncoderBlockImpl> {
 public:
  EncoderBlockImpl(const ViTLayout& layout, double dropout);
  void reset() override;
  torch::Tensor forward(const torch::Tensor& x);

 private:
  ViTLayout layout_;
  double dropout_;
  torch::nn::LayerNorm ln_1_{nullptr}, ln_2_{nullptr};
  SelfAttention self_attention_{nullptr};
  torch::nn::Sequential mlp_{nullptr};
};
TORCH_MODULE(EncoderBlock);

// Position embeddings, the blocks as `layers` (encoder_layer_0, ...), and a final LayerNorm `ln`.
class EncoderImpl : public torch::nn::Cloneable<EncoderImpl> {
 public:
  EncoderImpl(const ViTLayout& layout, int64_t seq_length, double dropout);
  void reset() override;
  torch::Tensor forward(const torch::Tensor& x);

  torch::Tensor pos_embedding;

 private:
  ViTLayout layout_;
  int64_t seq_length_;
  double dropout_;
  Stack layers_{nullptr};  // a Stack keeps the names encoder_layer_N in clones
  torch::nn::LayerNorm ln_{nullptr};
};
TORCH_MODULE(Encoder);

class VisionTransformerImpl : public torch::nn::Cloneable<VisionTransformerImpl> {
 public:
  VisionTransformerImpl(ViTLayout layout, ClassifierOptions options);
  void reset() override;
  torch::Tensor forward(const torch::Tensor& images);
  void pretty_print(std::ostream& stream) const override;

  ViTLayout layout;
  ClassifierOptions options;

 private:
  int64_t image_size() const { return options.image_size().value_or(224); }

  torch::Tensor class_token_;
  torch::nn::Conv2d conv_proj_{nullptr};
  Encoder encoder_{nullptr};
  Stack heads_{nullptr};
};
TORCH_MODULE(VisionTransformer);

// Dropout (torchvision's `dropout`, on the embeddings, after attention and in the MLP) defaults
// to 0, as torchvision's.
VisionTransformer vision_transformer(const ViTLayout& layout, const ClassifierOptions& options);

}  // namespace dpt::models
