#include "dptrain/train/evaluator.h"

#include <chrono>
#include <ostream>
#include <string>
#include <utility>

#include "dptrain/data/sampler.h"
#include "dptrain/dist/init.h"
#include "dptrain/train/bad_images.h"
#include "dptrain/train/logs/observers.h"
#include "local_setup.h"
#include "validation_pass.h"

namespace dpt::train {

struct Evaluator::State {
  TrainOptions options;
  RunDatasets data;
  models::Classifier model{nullptr};
  std::shared_ptr<dist::Communicator> comm;
  at::Device device{at::kCPU};

  explicit State(TrainOptions o) : options(std::move(o)) {}
};

Evaluator::Evaluator(TrainOptions options) : state_(std::make_unique<State>(std::move(options))) {
  State& s = *state_;
  // Local checks first, so that a bad folder, name or file fails on every rank before any waits.
  LocalSetup local = prepare_locally(s.options, Splits::kValOnly);
  refuse_untrained_classifier(local.untrained_classifier);
  s.data = std::move(local.data);
  s.model = local.model;
  s.comm = dist::init_process_group(s.options.parallel().dist());
  s.device = rank_device(s.options.parallel(), *s.comm);
  s.model->to(s.device);
  if (s.options.channels_last()) to_channels_last(*s.model);
  if (s.comm->rank() == 0) {  // rank 0 reports, as the Trainer's leader does
    if (s.options.logs()) {
      for (auto& observer : make_observers(*s.options.logs())) s.options.observers().push_back(std::move(observer));
    }
    if (s.options.log() != nullptr) {
      for (const auto& note : local.notes) *s.options.log() << note << "\n";
    }
  }
}

Evaluator::~Evaluator() = default;

MetricSums Evaluator::evaluate() {
  State& s = *state_;
  const auto start = std::chrono::steady_clock::now();
  const int64_t images = s.data.val->size();
  const LocalPass local = validate_locally(*s.model, s.data.val,
                                           data::EvalSampler(images, s.comm->size(), s.comm->rank()).indices(),
                                           s.options, s.device);
  const MetricSums all = local.sums.reduced(*s.comm);
  // Every rank checks the bound (the sums are alike on all), so all fail together.
  const std::string bad_images = BadImages(s.options.data().max_bad_images())
                                     .finish({"val", all.skipped_images, all.count, images, local.skipped});
  if (s.options.log() != nullptr && !bad_images.empty()) *s.options.log() << bad_images << std::endl;
  if (s.comm->rank() == 0) {
    EpochReport report =
        pass_report("val", all, std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count());
    report.standalone = true;
    for (auto& observer : s.options.observers()) observer->on_epoch(report);
  }
  return all;
}

int Evaluator::rank() const { return state_->comm->rank(); }

}  // namespace dpt::train
