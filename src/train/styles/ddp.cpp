// --mode ddp: DistributedDataParallel, gradients averaged over the ranks during backward; with
// --zero, the optimizer (and under ZeRO-2 the reduced gradients) sharded over the ranks.
#include "../parallel_style.h"

#include "dptrain/compat/compat.h"
#include "dptrain/compat/pickle.h"
#include "dptrain/parallel/bucket_tuner.h"
#include "dptrain/parallel/comm_hook_options.h"
#include "dptrain/parallel/ddp.h"
#include "dptrain/train/checkpoint/powersgd_state.h"

namespace dpt::train {
namespace {

class DdpStyle : public ParallelStyle {
 public:
  explicit DdpStyle(const StyleInputs& in)
      : ParallelStyle(in.model, in.comm, /*together=*/true),
        ddp_(in.model, in.comm,
             DDPOptions().reducer(ReducerOptions(in.options.parallel().reducer())
                                      // ZeRO-2: each bucket reduce-scattered, each rank keeping its part.
                                      .shard_gradients(in.options.parallel().zero_stage() == 2))),
        comm_hook_(in.options.parallel().comm_hook()),
        log_(in.options.log()) {
    const int stage = in.options.parallel().zero_stage();
    if (comm_hook_.kind() != CommHookKind::Allreduce) ddp_.register_comm_hook(make_comm_hook(comm_hook_, &powersgd_));
    if (in.options.parallel().tune_buckets()) start_tuning(in.options);
    if (stage == 0) {
      optimizer_ = in.make_optimizer();
      return;
    }
    // Over this style's reducer, whose buckets the stage-2 optimizer's parts are cut from.
    optimizer_ = sharded_ = make_sharded_optimizer(
        stage, in.comm, in.param_groups(),
        [&in](std::vector<torch::optim::OptimizerParamGroup> shard) { return in.make_optimizer(std::move(shard)); },
        &ddp_.reducer());
  }

  // After a resume, which may have brought an earlier run's choice: says what the buckets do.
  void start() override {
    if (!tuner_ || !log_ || comm_->rank() != 0) return;
    *log_ << "buckets: "
          << (tuner_->done() ? str(tuner_->current_mb(), " MiB, one bucket for the whole gradient: nothing to tune")
                             : str("tuning over the first ", tuner_->steps(), " steps"))
          << std::endl;
  }
  at::Tensor forward(const at::Tensor& images) override { return ddp_.forward(images); }
  // As an optimizer over the reduced parameters clears them (ZeRO-2's holds only its parts).
  void zero_grad() override {
    compat::zero_grad(ddp_.parameters());
    // Between steps, where the last step's bucket times (the timeline's) have been read.
    if (next_cap_mb_) ddp_.reducer().rebucket(*std::exchange(next_cap_mb_, std::nullopt));
  }
  void backward(const at::Tensor& loss, bool reduce) override {
    if (reduce) {
      loss.backward();
      if (tuner_ && !tuner_->done()) measure_step();
      return;
    }
    auto local_only = ddp_.no_sync();
    loss.backward();
  }
  c10::impl::GenericDict gather_comm_hook_state() override {
    return powersgd_ ? gather_powersgd_state(*powersgd_, *comm_) : compat::string_dict();
  }
  std::string load_comm_hook_state(const c10::impl::GenericDict& state) override {
    if (!powersgd_ || state.size() == 0) return "";
    if (load_powersgd_state(*powersgd_, state, comm_->rank(), comm_->size())) return "";
    return "the checkpoint's PowerSGD errors belong to another number of processes: each starts without one (the "
           "rest of PowerSGD's state is resumed)";
  }
  double tuned_bucket_cap_mb() const override {
    if (tuner_) return tuner_->done() ? tuner_->current_mb() : 0;
    return resumed_cap_mb_;
  }
  void resume_bucket_cap(double mb) override {
    if (!tuner_) return;  // a size given this time, or a style that keeps its own
    tuner_.reset();
    next_cap_mb_ = resumed_cap_mb_ = mb;
    if (log_ && comm_->rank() == 0) *log_ << "buckets: " << mb << " MiB, as the run resumed chose" << std::endl;
  }
  const Reducer* reducer() const override { return &ddp_.reducer(); }
  std::string describe() const override {
    switch (comm_hook_.kind()) {
      case CommHookKind::Allreduce: return "DistributedDataParallel";
      case CommHookKind::PowerSGD:
        return str("DistributedDataParallel, PowerSGD rank ", comm_hook_.powersgd().matrix_approximation_rank(),
                   " from step ", comm_hook_.powersgd().start_iter());
      default: return str("DistributedDataParallel, ", to_string(comm_hook_.kind()), " allreduce");
    }
  }

 private:
  // Tunes the bucket size where nothing rules it out; else says why it stays.
  void start_tuning(const TrainOptions& options) {
    const char* why_not = options.parallel().zero_stage() == 2 ? "ZeRO-2 cuts its optimizer from the buckets"
                          : comm_hook_.kind() == CommHookKind::PowerSGD ? "PowerSGD keeps its state per bucket"
                          : options.deterministic() && comm_->size() > 2
                              ? "--deterministic: with more than two ranks the buckets set the order of the sums"
                          : comm_->size() < 2 ? "one process reduces nothing"
                                              : nullptr;
    if (why_not) {
      if (log_ && comm_->rank() == 0 && comm_->size() > 1) {
        *log_ << "buckets: " << options.parallel().reducer().bucket_cap_mb() << " MiB, not tuned (" << why_not
              << ")" << std::endl;
      }
      return;
    }
    int64_t gradient_bytes = 0;
    for (const auto& p : ddp_.parameters()) {
      if (p.requires_grad()) gradient_bytes += p.numel() * static_cast<int64_t>(p.element_size());
    }
    tuner_.emplace(gradient_bytes);
    ddp_.reducer().rebucket(tuner_->current_mb());
  }

  // One reducing step of the sweep: its backward and reduction, the slowest rank's (every rank
  // then takes the same next size).
  void measure_step() {
    const ReductionTimes times = ddp_.reducer().last_reduction();
    const double seconds = std::chrono::duration<double>(times.finished - times.began).count();
    at::Tensor slowest = at::full({1}, seconds, at::kDouble).to(comm_->device());
    {
      const dist::CollectiveLabel label("bucket tuning");
      comm_->all_reduce(slowest, dist::ReduceOp::Max);
    }
    next_cap_mb_ = tuner_->record(slowest.item<double>());
    if (tuner_->done() && log_ && comm_->rank() == 0) {
      *log_ << "buckets: tuned to " << tuner_->describe()
            << ", the mean of each size's backward and reduction (the slowest rank's)" << std::endl;
    }
  }

  DistributedDataParallel<models::Classifier> ddp_;
  CommHookOptions comm_hook_;
  std::shared_ptr<PowerSGDState> powersgd_;  // --comm-hook powersgd
  LogStream log_;
  std::optional<BucketTuner> tuner_;   // while choosing the bucket size, and after (its choice)
  std::optional<double> next_cap_mb_;  // the size the next step's buckets take
  double resumed_cap_mb_ = 0;          // a resumed run's choice, kept in its checkpoints
};

class DdpKind : public StyleKind {
 public:
  ParallelMode mode() const override { return ParallelMode::Ddp; }
  bool accepts(StyleFlag flag) const override {
    return flag != StyleFlag::ParameterServer && flag != StyleFlag::Replicas;
  }
  void check(const TrainOptions& options) const override {
    DPT_CHECK(options.parallel().zero_stage() != 2 || options.parallel().comm_hook().kind() == CommHookKind::Allreduce,
              ConfigError, "--comm-hook ", to_string(options.parallel().comm_hook().kind()),
              " cannot go with --zero 2, which reduce-scatters each bucket instead of all-reducing it; use --zero 1 "
              "(the optimizer's state sharded, the gradients whole)");
  }
  std::unique_ptr<ParallelStyle> make(const StyleInputs& inputs) const override {
    return std::make_unique<DdpStyle>(inputs);
  }
};

}  // namespace

const StyleKind& ddp_style_kind() {
  static const DdpKind kind;
  return kind;
}

}  // namespace dpt::train
