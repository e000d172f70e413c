#pragma once
// Top-k accuracy and the loss, summed over batches and ranks so that distributed evaluation gives
// exactly the numbers one process would.
//
//   dpt::train::MetricSums sums;
//   for (auto& [images, targets] : loader) {
//     auto logits = model->forward(images);
//     auto loss = torch::nn::functional::cross_entropy(logits, targets);
//     sums.add(logits, targets, loss.item<double>());
//   }
//   auto all = sums.reduced(*comm);           // collective: every rank calls it
//   all.top1_percent();                       // == the single-process figure
//
//   dpt::train::AverageMeter acc1("Acc@1", 2);
//   acc1.update(batch_acc1, batch_size);
//   std::cout << acc1.str();                  // "Acc@1  75.00 ( 62.50)"

#include <cstdint>
#include <string>
#include <vector>

#include <ATen/ATen.h>

#include "dptrain/dist/communicator.h"

namespace dpt::train {

// For each k in `ks`, how many rows of `logits` (N x C) rank their target (N, class indices)
// among the top k: without ties, what pytorch/examples' accuracy() computes with torch.topk.
// torch.topk leaves the order of equal values unspecified (LibTorch 1.13 on CPU returns classes
// 2, 4, 1 for three equal maxima at 1, 2, 4), so here ties are broken towards the lower class
// index, as a stable descending sort would: a target's rank is the number of classes with a
// larger logit plus the number of lower-indexed classes with an equal one. The counts then depend
// on the logits alone, not on the device or library. NaN ranks above every number, as in
// torch.topk's and torch.argmax's order. A k larger than C counts every row.
std::vector<int64_t> topk_correct(const at::Tensor& logits, const at::Tensor& targets,
                                  const std::vector<int64_t>& ks);

// Sums of the loss and of correct predictions, over batches and then over ranks. The counts are
// integers held in float64 when reduced, exact up to 2^53 samples.
struct MetricSums {
  double loss_sum = 0;  // sum over samples of the per-sample loss
  int64_t correct1 = 0;
  int64_t correct5 = 0;
  int64_t count = 0;
  // Ranks that asked to stop (a training step's reduction carries this vote, so that agreeing on
  // when to stop costs no collective of its own); 0 or 1 on a single rank before reduction.
  int64_t stop_votes = 0;
  // Bad images the loaders skipped (bad_images.h), riding along so that every rank knows the
  // count at the same step.
  int64_t skipped_images = 0;
  // Replacements that have asked to join the group so far (--on-failure continue, dist/joining.h):
  // rank 0 reads the count from the store and the others pass 0, so that every rank learns it at
  // the same step and all admit them at its end. Not added up over steps.
  int64_t join_requests = 0;
  // Values that ride along in the same all-reduce, summed elementwise (every rank passes as many):
  // at a straggler window's end, each rank's row of step times (StragglerWatch::rows_to_send).
  std::vector<double> rank_rows;

  // Adds a batch: `mean_loss` is the batch's mean loss (cross_entropy's default reduction).
  void add(const at::Tensor& logits, const at::Tensor& targets, double mean_loss);
  void add(const MetricSums& other);

  // The sums over all ranks of `comm` (one all-reduce of seven float64 values and rank_rows);
  // collective.
  MetricSums reduced(dist::Communicator& comm) const;

  // Means; 0 when nothing was added.
  double loss() const;
  double top1_percent() const;
  double top5_percent() const;
};

// A running value and its average, as pytorch/examples' AverageMeter, for progress lines.
class AverageMeter {
 public:
  explicit AverageMeter(std::string name, int precision = 3);

  // `value` is the mean over `n` samples.
  void update(double value, int64_t n = 1);
  void reset();

  const std::string& name() const { return name_; }
  double value() const { return value_; }
  double sum() const { return sum_; }
  int64_t count() const { return count_; }
  double average() const { return count_ > 0 ? sum_ / count_ : 0.0; }

  // "name value (average)", both fixed-point with the meter's precision.
  std::string str() const;

 private:
  std::string name_;
  int precision_;
  double value_ = 0;
  double sum_ = 0;
  int64_t count_ = 0;
};

}  // namespace dpt::train
