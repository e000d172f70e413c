#pragma once
// GhostNet (Han et al. 2020) with the layout of the authors' reference PyTorch model
// (huawei-noah/Efficient-AI-Backbones, ghostnet_pytorch/ghostnet.py, `ghostnet(width=1.0)`), so its
// state-dict names are theirs: conv_stem, bn1, blocks.S.I.ghost1.primary_conv.0.weight, ...,
// conv_head, classifier. The authors publish ImageNet weights for width 1.0 in that repository
// (ghostnet_pytorch/models/state_dict_73.98.pth, 73.98% top-1); saved as a plain dict of tensors
// they load with --pretrained.
//
//   auto net = dpt::models::ghostnet(1.0, dpt::models::ClassifierOptions().num_classes(10));

#include <string>

#include <torch/nn/cloneable.h>
#include <torch/nn/modules/container/any.h>
#include <torch/nn/modules/conv.h>
#include <torch/nn/modules/linear.h>
#include <torch/nn/pimpl.h>

#include "dptrain/models/classifier.h"
#include "dptrain/models/layers.h"

namespace dpt::models {

// conv_stem, bn1, ReLU, `blocks` (the stages of Ghost bottlenecks, then a 1x1 convolution, norm
// and ReLU), global average pooling, conv_head, ReLU, dropout (0.2 unless the options say) and the
// linear `classifier`. PyTorch's default initialisation, as the reference.
class GhostNetImpl : public torch::nn::Cloneable<GhostNetImpl>, public NormLayerHolder {
 public:
  GhostNetImpl(double width, ClassifierOptions options);
  void reset() override;
  torch::Tensor forward(const torch::Tensor& images);
  // Swaps bn1 (see dpt::convert_sync_batchnorm); the blocks swap their own.
  void replace_norm_layer(const std::string& name, torch::nn::AnyModule layer, NormLayer factory) override;

 private:
  double width_;
  ClassifierOptions options_;
  torch::nn::Conv2d conv_stem_{nullptr}, conv_head_{nullptr};
  torch::nn::AnyModule bn1_;
  Stack blocks_{nullptr};
  torch::nn::Linear classifier_{nullptr};
};
TORCH_MODULE(GhostNet);

GhostNet ghostnet(double width, const ClassifierOptions& options);

}  // namespace dpt::models
