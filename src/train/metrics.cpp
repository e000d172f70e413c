#include "dptrain/train/metrics.h"

#include <fmt/format.h>

#include "dptrain/common/error.h"

namespace dpt::train {

std::vector<int64_t> topk_correct(const at::Tensor& logits, const at::Tensor& targets,
                                  const std::vector<int64_t>& ks) {
  DPT_CHECK(logits.dim() == 2, ConfigError, "top-k accuracy needs logits of shape [N, C], got ",
            logits.sizes());
  DPT_CHECK(targets.dim() == 1 && targets.size(0) == logits.size(0), ConfigError,
            "top-k accuracy needs one target per row of the logits: logits ", logits.sizes(),
            ", targets ", targets.sizes());
  at::NoGradGuard no_grad;
  const at::Tensor target = targets.to(logits.device(), at::kLong).unsqueeze(1);
  const at::Tensor target_logit = logits.gather(1, target);
  const at::Tensor classes = at::arange(logits.size(1), target.options()).unsqueeze(0);
  // NaN ranks above every number, as torch.topk and torch.argmax order it, and NaNs tie with one
  // another. Every comparison with NaN is false: without this, a diverged model's rows of NaN
  // would rank each target first and score 100%.
  const at::Tensor nan = logits.isnan();
  const at::Tensor target_nan = target_logit.isnan();
  const at::Tensor above = logits.gt(target_logit).logical_or(nan.logical_and(target_nan.logical_not()));
  const at::Tensor tied = logits.eq(target_logit).logical_or(nan.logical_and(target_nan));
  const at::Tensor rank = above.sum(1) + tied.logical_and(classes.lt(target)).sum(1);
  std::vector<at::Tensor> counts;
  for (int64_t k : ks) {
    DPT_CHECK(k > 0, ConfigError, "top-k accuracy needs k > 0, got ", k);
    counts.push_back(rank.lt(k).sum());
  }
  const at::Tensor host = at::stack(counts).cpu();  // one synchronization for all k
  return std::vector<int64_t>(host.data_ptr<int64_t>(), host.data_ptr<int64_t>() + ks.size());
}

void MetricSums::add(const at::Tensor& logits, const at::Tensor& targets, double mean_loss) {
  const auto correct = topk_correct(logits, targets, {1, 5});
  const int64_t n = logits.size(0);
  loss_sum += mean_loss * n;
  correct1 += correct[0];
  correct5 += correct[1];
  count += n;
}

void MetricSums::add(const MetricSums& other) {
  loss_sum += other.loss_sum;
  correct1 += other.correct1;
  correct5 += other.correct5;
  count += other.count;
  stop_votes += other.stop_votes;
  skipped_images += other.skipped_images;
}

MetricSums MetricSums::reduced(dist::Communicator& comm) const {
  std::vector<double> all{loss_sum, static_cast<double>(correct1), static_cast<double>(correct5),
                          static_cast<double>(count), static_cast<double>(stop_votes),
                          static_cast<double>(skipped_images), static_cast<double>(join_requests)};
  all.insert(all.end(), rank_rows.begin(), rank_rows.end());
  at::Tensor values = at::tensor(all, at::kDouble).to(comm.device());
  comm.all_reduce(values, dist::ReduceOp::Sum);
  values = values.cpu();
  const double* v = values.data_ptr<double>();
  MetricSums out;
  out.loss_sum = v[0];
  out.correct1 = static_cast<int64_t>(v[1]);
  out.correct5 = static_cast<int64_t>(v[2]);
  out.count = static_cast<int64_t>(v[3]);
  out.stop_votes = static_cast<int64_t>(v[4]);
  out.skipped_images = static_cast<int64_t>(v[5]);
  out.join_requests = static_cast<int64_t>(v[6]);
  out.rank_rows.assign(v + 7, v + all.size());
  return out;
}

double MetricSums::loss() const { return count > 0 ? loss_sum / count : 0.0; }
double MetricSums::top1_percent() const { return count > 0 ? 100.0 * correct1 / count : 0.0; }
double MetricSums::top5_percent() const { return count > 0 ? 100.0 * correct5 / count : 0.0; }

AverageMeter::AverageMeter(std::string name, int precision)
    : name_(std::move(name)), precision_(precision) {}

void AverageMeter::update(double value, int64_t n) {
  value_ = value;
  sum_ += value * n;
  count_ += n;
}

void AverageMeter::reset() { *this = AverageMeter(name_, precision_); }

std::string AverageMeter::str() const {
  // pytorch/examples print "{name} {val:6.2f} ({avg:6.2f})": a width that keeps columns aligned.
  const int width = precision_ + 4;
  return fmt::format("{} {:{}.{}f} ({:{}.{}f})", name_, value_, width, precision_, average(), width,
                     precision_);
}

}  // namespace dpt::train
