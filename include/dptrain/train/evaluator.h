#pragma once
// One validation pass of a model's weights over the process group, with nothing of training's
// machinery: only the validation split is opened (a folder holding only val/ will do, and the
// batch size is checked against nothing else), no parallel style, optimizer or sampler is built.
// The counts are summed over the ranks exactly, as the Trainer's validation does; the two run the
// same pass.
//
//   auto options = dpt::train::TrainOptions("resnet50").batch_size(256);
//   options.data().root("/data/imagenet");                    // reads /data/imagenet/val
//   options.checkpoint().pretrained("run1/model_best.pt");   // the weights to evaluate
//   dpt::train::Evaluator evaluator(options);                 // checks locally, then joins the group
//   dpt::train::MetricSums all = evaluator.evaluate();        // collective
//
// `dptrain eval` runs it.

#include <memory>

#include "dptrain/train/metrics.h"
#include "dptrain/train/train_options.h"

namespace dpt::train {

class Evaluator {
 public:
  // Opens the validation set, builds options.arch() with CheckpointOptions::pretrained()'s weights
  // (ConfigError when they were made for other classes: their classifier would be random), then
  // joins the process group DistOptions describe.
  explicit Evaluator(TrainOptions options);
  ~Evaluator();
  Evaluator(const Evaluator&) = delete;
  Evaluator& operator=(const Evaluator&) = delete;

  // The pass over every rank's share of the validation set (data::EvalSampler): sums over all
  // ranks. Rank 0 tells the observers (a "val" EpochReport) and logs the pass's bad images.
  // Collective.
  MetricSums evaluate();

  int rank() const;

 private:
  struct State;
  std::unique_ptr<State> state_;
};

}  // namespace dpt::train
