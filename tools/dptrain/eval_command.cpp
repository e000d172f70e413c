// `dptrain eval`: one validation pass of a checkpoint (or a Python-saved state dict) over the
// process group, with counts summed exactly over ranks. Rank 0 ends with one JSON line.
//
//   dptrain eval /data/imagenet --checkpoint run1/model_best.pt
//   dptrain launch --standalone --nproc-per-node 2 -- dptrain eval --dummy --checkpoint ck.pt

#include <iostream>

#include "command.h"
#include "dptrain/common/error.h"
#include "dptrain/train/checkpoint/checkpoint_file.h"
#include "dptrain/train/trainer.h"
#include "run_flags.h"

namespace dpt::cli {

namespace {

struct EvalFlags {
  train::TrainOptions options = command_line_options();
  std::string checkpoint;
};

// The model name a dptrain checkpoint records; plain state dicts record none.
std::string checkpoint_arch(const std::string& file) {
  const auto loaded = train::load_checkpoint(file);
  if (loaded.isGenericDict()) {
    const auto dict = loaded.toGenericDict();
    auto arch = dict.find("arch");
    if (arch != dict.end() && arch->value().isString()) return arch->value().toStringRef();
  }
  throw ConfigError("checkpoint " + file + " does not say which model it holds; pass -a");
}

int run_eval(const EvalFlags& f, bool arch_given) {
  train::TrainOptions options = f.options;
  train::check_checkpoint_file(f.checkpoint, "checkpoint", "--checkpoint");
  if (!arch_given) options.arch(checkpoint_arch(f.checkpoint));
  options.checkpoint().pretrained(f.checkpoint);
  train::Trainer trainer(options);
  const auto m = trainer.evaluate();
  if (trainer.rank() == 0) {
    std::cout << metrics_json(m).dump() << std::endl;
  }
  return 0;
}

}  // namespace

Command add_eval_command(CLI::App& root) {
  auto flags = std::make_shared<EvalFlags>();
  auto* app = root.add_subcommand("eval", "Evaluate a checkpoint on the validation set, over the process group");
  add_run_flags(*app, flags->options);
  app->add_option("--checkpoint", flags->checkpoint, "a dptrain checkpoint or a Python dict(state_dict)")->required();
  return {app, [flags, app](const std::vector<std::string>&) { return run_eval(*flags, app->count("--arch") > 0); }};
}

}  // namespace dpt::cli
