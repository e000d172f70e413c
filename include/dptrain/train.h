#pragma once
// The train layer: learning-rate schedules, loss scaling, distributed metrics, checkpoint files,
// progress and metrics logs (console, JSONL, TensorBoard).
#include "dptrain/train/checkpoint_file.h"
#include "dptrain/train/console_observer.h"
#include "dptrain/train/crc32c.h"
#include "dptrain/train/event_file.h"
#include "dptrain/train/grad_scaler.h"
#include "dptrain/train/jsonl_observer.h"
#include "dptrain/train/log_file.h"
#include "dptrain/train/lr_schedule.h"
#include "dptrain/train/metrics.h"
#include "dptrain/train/observers.h"
#include "dptrain/train/report.h"
#include "dptrain/train/summary_writer.h"
#include "dptrain/train/tensorboard_observer.h"
