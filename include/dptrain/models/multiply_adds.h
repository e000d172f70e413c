#pragma once
// The multiply-adds a model's forward costs, counted from the matrix operations it runs:
// convolutions, matrix products and attention, the operations that bound a training step and that
// published counts (torchvision's "GFLOPS" per weight, the papers' tables) add up. Normalisation,
// activations and pooling are left out, as those counts leave them out. A training step costs
// about 3x the forward (the backward computes the gradients of inputs and of weights), so
// a model's FLOP/s, for its utilisation of the hardware, is 2 x 3 x multiply-adds x images/s.
//
//   auto model = dpt::models::create("resnet50");
//   double macs = dpt::models::forward_multiply_adds(model, 224);   // 4.09e9
//
//   dpt::models::MultiplyAddCounter counter;    // anything run on this thread meanwhile
//   model->forward(images);
//   double total = counter.total();

#include <ATen/record_function.h>

#include <cstdint>

#include "dptrain/models/classifier.h"

namespace dpt::models {

// Counts the multiply-adds of the convolutions, matrix products (mm, addmm, bmm, baddbmm) and
// scaled dot-product attentions that run on this thread while it lives, each counted once: an
// operation that runs inside a counted one (a convolution's backend kernel, the products inside
// 1.13's attention) is part of it. Counters do not nest.
class MultiplyAddCounter {
 public:
  MultiplyAddCounter();
  ~MultiplyAddCounter();
  MultiplyAddCounter(const MultiplyAddCounter&) = delete;
  MultiplyAddCounter& operator=(const MultiplyAddCounter&) = delete;

  double total() const;

 private:
  at::CallbackHandle handle_;
};

// The multiply-adds of one forward of one image_size x image_size RGB image through `model`, run
// in eval mode without gradients (auxiliary heads, which only training runs, are not counted);
// the model's mode is restored.
double forward_multiply_adds(Classifier& model, int64_t image_size);

}  // namespace dpt::models
