#pragma once
// What every process of a training job prepares on its own before it meets the others: the
// options checked, the checkpoint to resume from read, the datasets opened and the model built
// with its starting weights (resumed, pretrained or seeded alike on every rank). Local work only,
// so that a bad folder, name or file fails on every rank alike before any rank waits for the
// others. The trainer, the parameter server's server process and the evaluator start here.

#include <string>
#include <vector>

#include "datasets.h"
#include "dptrain/models/classifier.h"
#include "dptrain/train/checkpoint/auto_resume.h"
#include "dptrain/train/train_options.h"

namespace dpt::train {

struct LocalSetup {
  FoundCheckpoint resumed;  // --resume's checkpoint; unset checkpoint: a fresh start
  RunDatasets data;
  models::Classifier model{nullptr};  // on the CPU, in its starting weights
  std::vector<std::string> notes;     // what the run's banner says of the data and the starting weights
  // Why the classifier starts random although weights were given (they were made for other
  // classes: training fine-tunes it, evaluation alone would score chance); empty otherwise.
  std::string untrained_classifier;
};

// Throws ConfigError, DataError or CheckpointError naming the flag, folder or file. A resumed
// checkpoint's seed replaces options.seed(), so that the run continues the one it resumes. The
// parameter server's own checks come before, in serves_parameters(), which both callers ask first.
// An evaluation opens only the validation split (Splits::kValOnly).
LocalSetup prepare_locally(TrainOptions& options, Splits splits = Splits::kTrainAndVal);

// ConfigError when `untrained_classifier` (LocalSetup's) says the classifier is random: a
// validation pass before any training would score chance.
void refuse_untrained_classifier(const std::string& untrained_classifier);

// Channels-last weights make convolutions pick NHWC kernels; the inputs follow the same layout.
void to_channels_last(torch::nn::Module& module);

}  // namespace dpt::train
