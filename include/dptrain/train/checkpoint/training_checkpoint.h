#pragma once
// What a training checkpoint holds, as a dict that Python's torch.load reads like pytorch/examples'
// checkpoints (`epoch`, `arch`, `state_dict` with torchvision's names, `best_acc1`, `optimizer` as
// optimizer.state_dict()) plus what an exact resume needs: the step within the epoch, the global
// step and batch, the sampler, the scaler, the seed and the CPU random generator.
//
//   dpt::train::TrainingCheckpoint cp;
//   cp.arch = "resnet18"; cp.epoch = 3; cp.state_dict = dpt::models::state_dict(*model);
//   cp.optimizer = dpt::train::optimizer_state_dict(optimizer);
//   dpt::train::save_checkpoint(cp.to_ivalue(), dir / "checkpoint.pt");
//   auto back = dpt::train::TrainingCheckpoint::from_ivalue(dpt::train::load_checkpoint(file), file);
//
// Python: ck = torch.load("checkpoint.pt"); torchvision.models.resnet18().load_state_dict(ck["state_dict"])

#include <cstdint>
#include <filesystem>
#include <string>

#include <ATen/core/Dict.h>
#include <ATen/core/ivalue.h>

#include "dptrain/data/sampler.h"
#include "dptrain/models/state_dict.h"

namespace dpt::train {

struct TrainingCheckpoint {
  std::string arch;
  int64_t epoch = 0;          // the epoch to continue with (pytorch/examples' meaning)
  int64_t step_in_epoch = 0;  // optimizer steps of `epoch` already done (a --max-steps stop)
  int64_t global_step = 0;    // optimizer steps since training began
  int64_t global_batch = 0;   // samples per step over all ranks, which step_in_epoch counts in
  // Samples of `epoch` done, over all ranks (step_in_epoch x global_batch unless the world size
  // changed within the epoch). Older checkpoints lack it: derived from the two above.
  int64_t samples_in_epoch = 0;
  int64_t world_size = 0;          // the processes that wrote it; 0: not recorded (older checkpoints)
  // The global batch at which the base learning rate applies; 0: not recorded.
  int64_t lr_reference_batch = 0;
  double best_acc1 = 0;
  uint64_t seed = 0;
  data::SamplerState sampler;
  models::StateDict state_dict;           // unwrapped names, CPU tensors
  c10::impl::GenericDict optimizer{c10::StringType::get(), c10::AnyType::get()};
  c10::impl::GenericDict scaler{c10::StringType::get(), c10::AnyType::get()};  // empty without AMP
  at::Tensor rng_state;                   // the default CPU generator's state
  // --model-ema: the average as Python's AveragedModel.state_dict() names it ("n_averaged",
  // "module.<name>"); empty without EMA (and in older checkpoints).
  models::StateDict model_ema;
  // --comm-hook powersgd: its state, every rank's errors included (powersgd_state.h); empty
  // otherwise (and in older checkpoints).
  c10::impl::GenericDict comm_hook{c10::StringType::get(), c10::AnyType::get()};
  // The DDP bucket size (MiB) the run chose by measuring (BucketTuner), which a resume keeps; 0:
  // none chosen (a size given, or older checkpoints).
  double bucket_cap_mb = 0;

  c10::IValue to_ivalue() const;
  // Throws CheckpointError naming `file` and the missing or mistyped entry.
  static TrainingCheckpoint from_ivalue(const c10::IValue& value, const std::filesystem::path& file);
};

// Reads a weights file for --pretrained: a TrainingCheckpoint (its state_dict) or a dict of name ->
// tensor saved from Python (torch.save(dict(model.state_dict()), path)). Throws CheckpointError
// naming the file when it is missing, unreadable or neither.
models::StateDict read_weights(const std::filesystem::path& file);

}  // namespace dpt::train
