// `dptrain eval`: one validation pass of a checkpoint (or a Python-saved state dict) over the
// process group, with counts summed exactly over ranks. Rank 0 ends with one JSON line.
//
//   dptrain eval /data/imagenet --checkpoint run1/model_best.pt
//   dptrain launch --standalone --nproc-per-node 2 -- dptrain eval --dummy --checkpoint ck.pt

#include <iostream>
#include <optional>
#include <string>

#include "command.h"
#include "dptrain/common/error.h"
#include "dptrain/train/checkpoint/checkpoint_file.h"
#include "dptrain/train/evaluator.h"
#include "run_flags.h"

namespace dpt::cli {

namespace {

struct EvalFlags {
  train::TrainOptions options = command_line_options();
  std::string checkpoint;
};

// The model name a dptrain checkpoint records; plain state dicts record none.
std::optional<std::string> recorded_arch(const std::string& file) {
  const auto loaded = train::load_checkpoint(file);
  if (loaded.isGenericDict()) {
    const auto dict = loaded.toGenericDict();
    auto arch = dict.find("arch");
    if (arch != dict.end() && arch->value().isString()) return arch->value().toStringRef();
  }
  return std::nullopt;
}

// The model to build: the checkpoint's unless -a names one, and never another than the one it
// records (its weights would only fail to load, entry by entry).
std::string model_to_evaluate(const std::string& file, const std::optional<std::string>& given) {
  const auto recorded = recorded_arch(file);
  DPT_CHECK(recorded || given, ConfigError, "checkpoint ", file, " does not say which model it holds; pass -a");
  DPT_CHECK(!recorded || !given || *recorded == *given, ConfigError, "checkpoint ", file, " holds a ", *recorded,
            " (its \"arch\"), not a ", *given, ": pass -a ", *recorded, ", or leave -a out");
  return recorded ? *recorded : *given;
}

int run_eval(const EvalFlags& f, bool arch_given) {
  train::TrainOptions options = f.options;
  train::check_checkpoint_file(f.checkpoint, "checkpoint", "--checkpoint");
  options.arch(model_to_evaluate(f.checkpoint, arch_given ? std::optional(options.arch()) : std::nullopt));
  options.checkpoint().pretrained(f.checkpoint);
  train::Evaluator evaluator(options);
  const auto m = evaluator.evaluate();
  if (evaluator.rank() == 0) {
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
