#pragma once
// What the trainer and `dptrain eval` (evaluator.h, nothing else of the training machinery)
// share: the device a rank computes on, how a run's loaders build their batches, one validation
// pass of a model over this rank's share of a validation set, and a finished pass's report.

#include <ATen/ATen.h>

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "dptrain/data/dataset.h"
#include "dptrain/data/loader.h"
#include "dptrain/dist/communicator.h"
#include "dptrain/models/classifier.h"
#include "dptrain/train/logs/report.h"
#include "dptrain/train/metrics.h"
#include "dptrain/train/train_options.h"

namespace dpt::train {

// The device this rank computes on once it has joined `comm`: --gpu's (checked against the
// devices this process sees), else the communicator's.
at::Device rank_device(const ParallelOptions& parallel, const dist::Communicator& comm);

// How a run's loaders build its batches: as `options` says; for a CPU run in the layout the model
// takes (the loader's threads convert to channels_last, off the step's path; a GPU converts its
// copy faster than a CPU thread would), page-locked for a CUDA device.
// Each loader pools its own buffers: one pool kept across passes would hold the training and the
// validation batches' buffers at once (two 4 GB sets at batch 256, 224 px, 8 threads), to save the
// page faults of each pass's first batches, which the loader's threads take, off the step's path.
data::LoaderOptions batch_loading(const TrainOptions& options, at::Device device);

struct LocalPass {
  MetricSums sums;  // this rank's, its skipped images counted
  std::vector<data::SkippedSample> skipped;  // the samples this rank left out as bad images
};

// `net` in eval mode, without gradients, over the samples `indices` of `set`, in --amp's
// precision; losses summed in float64, so that the sum over the ranks depends on the samples and
// not on how the ranks batched them. The caller sums over the ranks.
LocalPass validate_locally(models::ClassifierImpl& net, std::shared_ptr<const data::Dataset> set,
                           std::vector<int64_t> indices, const TrainOptions& options, at::Device device);

// The scores of `all` (sums over every rank) in `report`.
void fill_scores(Report& report, const MetricSums& all);

// A finished `phase` pass ("train" or "val") of `seconds`, from its sums over every rank; where
// training stands (epoch, step) and the model's rate are the trainer's to add.
EpochReport pass_report(const std::string& phase, const MetricSums& all, double seconds);

}  // namespace dpt::train
