#pragma once
// RegNet X and Y (Radosavovic et al. 2020) as torchvision builds them: stage widths and depths
// come from a linear rule quantised to a few widths; blocks are ResNet bottlenecks with grouped
// 3x3 convolutions (and squeeze-excitation in the Y models).
//
//   auto net = dpt::models::regnet("y_400mf", dpt::models::ClassifierOptions().num_classes(10));
//   // state dict: stem.0.weight, trunk_output.block1.block1-0.f.a.0.weight, ..., fc.weight

#include <cstdint>
#include <string>
#include <vector>

#include <torch/arg.h>
#include <torch/nn/cloneable.h>
#include <torch/nn/modules/linear.h>
#include <torch/nn/pimpl.h>

#include "dptrain/models/classifier.h"
#include "dptrain/models/layers.h"

namespace dpt::models {

// The design space's parameters for one model (the paper's equations 2 and 3): block j of `depth`
// has width w_0 + w_a * j, rounded to w_0 * w_m^k; equal widths form a stage.
struct RegNetDesign {
  TORCH_ARG(int64_t, depth) = 16;
  TORCH_ARG(int64_t, w_0) = 48;
  TORCH_ARG(double, w_a) = 27.89;
  TORCH_ARG(double, w_m) = 2.09;
  TORCH_ARG(int64_t, group_width) = 8;
  // Squeeze-excitation width as a fraction of a block's input width; 0 for the X models.
  TORCH_ARG(double, se_ratio) = 0.25;
};

// One stage's shape, derived from a design.
struct RegNetStage {
  int64_t width, depth, group_width;
};

// The stages `design` gives, as torchvision's BlockParams.from_init_params computes them (in
// float32, so the rounding agrees with it).
std::vector<RegNetStage> regnet_stages(const RegNetDesign& design);

// torchvision's RegNet: `stem` (3x3 stride-2 convolution, norm, ReLU to 32 channels),
// `trunk_output` (stages block1..., each of blocks blockS-I, all halving the resolution first),
// global average pooling and the linear `fc`.
class RegNetImpl : public torch::nn::Cloneable<RegNetImpl> {
 public:
  RegNetImpl(RegNetDesign design, ClassifierOptions options);
  void reset() override;
  torch::Tensor forward(const torch::Tensor& images);

 private:
  RegNetDesign design_;
  ClassifierOptions options_;
  Stack stem_{nullptr};
  Stack trunk_output_{nullptr};  // named children: a Stack keeps their names in clones
  torch::nn::Linear fc_{nullptr};
};
TORCH_MODULE(RegNet);

// torchvision's designs, by the name after its regnet_: x_ and y_ at 400mf, 800mf, 1_6gf, 3_2gf,
// 8gf, 16gf, 32gf, and y_128gf.
RegNet regnet(const std::string& name, const ClassifierOptions& options);

}  // namespace dpt::models
