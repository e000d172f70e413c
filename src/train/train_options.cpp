#include "dptrain/train/train_options.h"

#include "dptrain/common/error.h"
#include "dptrain/data/loader.h"
#include "dptrain/train/checkpoint/auto_resume.h"
#include "dptrain/train/style_traits.h"

namespace dpt::train {

ParallelMode parse_parallel_mode(const std::string& name) {
  if (name == "ddp") return ParallelMode::Ddp;
  if (name == "dp") return ParallelMode::Dp;
  if (name == "hvd") return ParallelMode::Hvd;
  if (name == "ps") return ParallelMode::Ps;
  DPT_CHECK(false, ConfigError, "unknown --mode '", name, "'; use ddp, dp, hvd or ps");
  return ParallelMode::Ddp;
}

std::string to_string(ParallelMode mode) {
  switch (mode) {
    case ParallelMode::Ddp:
      return "ddp";
    case ParallelMode::Dp:
      return "dp";
    case ParallelMode::Hvd:
      return "hvd";
    case ParallelMode::Ps:
      return "ps";
  }
  return "?";
}

void check_options(const TrainOptions& o) {
  DPT_CHECK(o.batch_size() > 0, ConfigError, "--batch-size must be positive, got ", o.batch_size());
  DPT_CHECK(o.accum_steps() >= 1, ConfigError, "--accum-steps must be at least 1, got ", o.accum_steps());
  DPT_CHECK(o.epochs() > 0, ConfigError, "--epochs must be positive, got ", o.epochs());
  DPT_CHECK(o.start_epoch() >= 0 && o.start_epoch() < o.epochs(), ConfigError, "--start-epoch must be in [0, ",
            o.epochs(), "), got ", o.start_epoch());
  DPT_CHECK(o.data().workers() > 0 && o.data().workers() <= data::kMaxLoaderThreads, ConfigError,
            "--workers must be from 1 to ", data::kMaxLoaderThreads, ", got ", o.data().workers());
  DPT_CHECK(o.checkpoint().keep() >= 1, ConfigError, "--keep-checkpoints must be at least 1, got ",
            o.checkpoint().keep());
  if (o.logs()) checked_print_freq(o.logs()->print_freq());  // here, on every rank: only rank 0 logs
  DPT_CHECK(!o.max_steps() || *o.max_steps() > 0, ConfigError, "--max-steps must be positive, got ",
            o.max_steps().value_or(0));
  const CheckpointOptions& c = o.checkpoint();
  DPT_CHECK(!c.every_steps() || *c.every_steps() >= 1, ConfigError, "--checkpoint-every must be at least 1, got ",
            c.every_steps().value_or(0));
  DPT_CHECK(!c.every_minutes() || *c.every_minutes() > 0, ConfigError, "--checkpoint-minutes must be positive, got ",
            c.every_minutes().value_or(0));
  DPT_CHECK(!c.output_dir().empty() || (!c.every_steps() && !c.every_minutes() && c.resume() != kResumeAuto),
            ConfigError, "--checkpoint-every, --checkpoint-minutes and --resume auto need --output, the folder ",
            "where checkpoints are written and looked for");
  DPT_CHECK(c.resume().empty() || c.pretrained().empty(), ConfigError,
            "--resume and --pretrained exclude each other: a resumed run continues with its own weights");
  const int zero = o.parallel().zero_stage();
  DPT_CHECK(zero >= 0 && zero <= 2, ConfigError, "--zero takes 0 (off), 1 (optimizer state sharded) or 2 (and the "
            "reduced gradients), got ", zero);
  check_style_options(o);
}

}  // namespace dpt::train
