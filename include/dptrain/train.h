#pragma once
// The train layer: learning-rate schedules, loss scaling, distributed metrics, checkpoint files.
#include "dptrain/train/checkpoint_file.h"
#include "dptrain/train/grad_scaler.h"
#include "dptrain/train/lr_schedule.h"
#include "dptrain/train/metrics.h"
#include "dptrain/train/report.h"
