#pragma once
// The optim layer: what steps a model's weights, reusable without the trainer: the optimizers
// `dptrain train` builds with their weight-decay groups (optimizer.h), FusedSGD, the GradScaler of
// mixed precision and what --amp computes in (amp.h), learning-rate schedules with linear scaling
// and warm-up, and the model's exponential moving average.
#include "dptrain/optim/amp.h"
#include "dptrain/optim/fused_sgd.h"
#include "dptrain/optim/grad_scaler.h"
#include "dptrain/optim/lr_schedule.h"
#include "dptrain/optim/model_ema.h"
#include "dptrain/optim/optimizer.h"
