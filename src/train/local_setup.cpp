// The local half of a process's start (local_setup.h).

#include "local_setup.h"

#include <ATen/Context.h>
#include <ATen/Parallel.h>

#include <filesystem>

#include "dptrain/common/error.h"
#include "dptrain/common/text.h"
#include "dptrain/models/inception.h"
#include "dptrain/models/registry.h"
#include "dptrain/train/checkpoint/checkpoint_file.h"
#include "dptrain/train/checkpoint/training_checkpoint.h"

namespace dpt::train {

namespace fs = std::filesystem;

namespace {

// What --resume names: a file, or with "auto" the newest readable checkpoint of --output, or
// nothing yet. pytorch/examples' convention: 'epoch' in a checkpoint is the epoch to start with next.
FoundCheckpoint read_resume_checkpoint(const TrainOptions& o) {
  const CheckpointOptions& c = o.checkpoint();
  FoundCheckpoint found;
  if (c.resume() == kResumeAuto) {
    found = find_resume_checkpoint(c.output_dir());
  } else {
    found.file = c.resume();
    check_checkpoint_file(found.file, "checkpoint", "--resume");
    found.checkpoint = TrainingCheckpoint::from_ivalue(load_checkpoint(found.file), found.file);
  }
  if (found.checkpoint) {
    DPT_CHECK(found.checkpoint->arch == o.arch(), CheckpointError, "checkpoint ", found.file.string(), " is for ",
              found.checkpoint->arch, ", not ", o.arch(), "; pass -a ", found.checkpoint->arch);
  }
  return found;
}

// Weights: resumed, pretrained or seeded (the same on every rank), into setup.model; what the
// run's banner says of them goes to setup.notes.
void build_model(const TrainOptions& options, const models::StateDict* resumed_weights, LocalSetup& setup) {
  const int64_t classes = setup.data.val->num_classes();  // the training split's too (open_datasets checks)
  torch::manual_seed(options.seed());  // the same initial weights on every rank
  setup.model = models::create(options.arch(), models::ClassifierOptions()
                                                   .num_classes(classes)
                                                   .image_size(setup.data.image_size)
                                                   .aux_logits(options.aux_logits())
                                                   .dropout(options.dropout()));
  if (resumed_weights) {
    models::load_state_dict(*setup.model, *resumed_weights);
  } else if (!options.checkpoint().pretrained().empty()) {
    const std::string& file = options.checkpoint().pretrained();
    auto weights = read_weights(file);
    if (!options.aux_logits()) models::drop_auxiliary_heads(weights);  // torchvision's GoogLeNet/Inception weights
    const auto fresh = models::keep_own_classifier(weights, *setup.model, classes);
    models::load_state_dict(*setup.model, weights);
    if (!fresh.keys.empty()) {
      const std::string made_for = str("the weights in ", file, " were made for ", fresh.weights_classes,
                                       " classes and this data has ", classes);
      setup.notes.push_back(str(made_for, ": ", join(fresh.keys, ", "), " start fresh (fine-tuning); their other ",
                                weights.size() - fresh.keys.size(), " entries are loaded"));
      setup.untrained_classifier = str(made_for, ", so their classifier (", join(fresh.keys, ", "),
                                       ") would be random");
    }
  }
}

}  // namespace

LocalSetup prepare_locally(TrainOptions& options, Splits splits) {
  check_options(options);
  // Rank 0 alone creates the folder, once the ranks have met: a file in its place fails them all here.
  const fs::path output = options.checkpoint().output_dir();
  std::error_code error;
  DPT_CHECK(output.empty() || !fs::exists(output, error) || fs::is_directory(output, error), ConfigError, "--output ",
            output.string(), " is a file, not a folder: name a folder for the run's checkpoints and logs");
  if (options.deterministic()) {  // before any kernel runs
    at::set_num_threads(1);
    at::globalContext().setDeterministicAlgorithms(true, /*warn_only=*/false);
  } else {
    // Training's shapes repeat every step, so cuDNN may time its algorithms once per shape and
    // keep the fastest, as PyTorch's ImageNet recipe sets `cudnn.benchmark`. Only CUDA reads it.
    at::globalContext().setBenchmarkCuDNN(true);
  }
  LocalSetup setup;
  if (!options.checkpoint().resume().empty()) {
    setup.resumed = read_resume_checkpoint(options);
    if (setup.resumed.checkpoint) options.seed(setup.resumed.checkpoint->seed);
  }
  setup.data = open_datasets(options.data(), options.seed(), models::info(options.arch()), splits);
  setup.notes = setup.data.warnings;
  const TrainingCheckpoint* resumed = setup.resumed.checkpoint ? &*setup.resumed.checkpoint : nullptr;
  build_model(options, resumed ? &resumed->state_dict : nullptr, setup);
  return setup;
}

void refuse_untrained_classifier(const std::string& untrained_classifier) {
  DPT_CHECK(untrained_classifier.empty(), ConfigError, untrained_classifier,
            ": evaluate them on data with their classes, or train to fine-tune them to these");
}

void to_channels_last(torch::nn::Module& module) {
  for (auto& p : module.parameters()) {
    if (p.dim() == 4) p.set_data(p.data().contiguous(at::MemoryFormat::ChannelsLast));
  }
}

}  // namespace dpt::train
