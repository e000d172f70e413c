#include "validation_pass.h"

#include <torch/utils.h>

#include "dptrain/common/text.h"
#include "dptrain/compat/compat.h"
#include "dptrain/data/device_prefetcher.h"
#include "dptrain/dist/cuda_device.h"
#include "dptrain/optim/amp.h"
#include "train_step.h"

namespace dpt::train {

at::Device rank_device(const ParallelOptions& parallel, const dist::Communicator& comm) {
  if (!parallel.gpu()) return comm.device();
  return dist::cuda_device(*parallel.gpu(), str("rank ", comm.rank(), ": --gpu"));
}

data::LoaderOptions batch_loading(const TrainOptions& options, at::Device device) {
  return data::LoaderOptions()
      .batch_size(options.batch_size())
      .threads(options.data().workers())
      .bad_image_policy(options.data().bad_images())
      .pin_memory(device.is_cuda())
      .memory_format(options.channels_last() && device.is_cpu() ? at::MemoryFormat::ChannelsLast
                                                                 : at::MemoryFormat::Contiguous);
}

LocalPass validate_locally(models::ClassifierImpl& net, std::shared_ptr<const data::Dataset> set,
                           std::vector<int64_t> indices, const TrainOptions& options, at::Device device) {
  net.eval();
  torch::NoGradGuard no_grad;
  data::Loader loader(std::move(set), std::move(indices), /*epoch=*/0, batch_loading(options, device));
  data::DevicePrefetcher batches(loader, data::DevicePrefetcherOptions(device));  // as a training epoch's
  LocalPass pass;
  while (auto batch = batches.next()) {
    auto [images, labels] = batch_to_device(*batch, device, options.channels_last());
    at::Tensor logits;
    {
      compat::AutocastGuard autocast(device.type(), optim::amp_dtype(device), options.amp());
      logits = net.forward(images).to(at::kFloat);
    }
    // Per-sample losses in float64: a float32 batch mean rounds differently for every batch composition.
    const auto loss = classification_loss(logits.to(at::kDouble), labels, options.loss().label_smoothing());
    pass.sums.add(logits, labels, loss.item<double>());
  }
  pass.sums.skipped_images = loader.skipped_count();
  pass.skipped = loader.skipped();
  return pass;
}

void fill_scores(Report& report, const MetricSums& all) {
  report.loss = all.loss();
  report.acc1 = all.top1_percent();
  report.acc5 = all.top5_percent();
}

EpochReport pass_report(const std::string& phase, const MetricSums& all, double seconds) {
  EpochReport report;
  fill_scores(report, all);
  report.phase = phase;
  report.samples = all.count;
  report.seconds = seconds;
  report.images_per_s = seconds > 0 ? static_cast<double>(all.count) / seconds : 0.0;
  report.skipped_images = all.skipped_images;
  return report;
}

}  // namespace dpt::train
