#pragma once
// The train layer: learning-rate schedules, loss scaling, distributed metrics, checkpoint files,
// the training loop.
#include "dptrain/train/checkpoint_file.h"
#include "dptrain/train/grad_scaler.h"
#include "dptrain/train/lr_schedule.h"
#include "dptrain/train/metrics.h"
#include "dptrain/train/optimizer_state.h"
#include "dptrain/train/report.h"
#include "dptrain/train/train_options.h"
#include "dptrain/train/trainer.h"
#include "dptrain/train/training_checkpoint.h"
