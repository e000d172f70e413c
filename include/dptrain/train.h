#pragma once
// The train layer: the training loop and its styles (train/) and distributed metrics; checkpoint
// files with exact resume (train/checkpoint/); the progress and metrics logs: console, JSONL,
// TensorBoard, per-rank timelines (train/logs/). What steps the weights is the optim layer's.
#include "dptrain/train/batch_mixing.h"
#include "dptrain/train/checkpoint/auto_resume.h"
#include "dptrain/train/checkpoint/checkpoint_file.h"
#include "dptrain/train/checkpoint/optimizer_state.h"
#include "dptrain/train/checkpoint/training_checkpoint.h"
#include "dptrain/train/stop_signals.h"
#include "dptrain/train/logs/console_observer.h"
#include "dptrain/train/logs/jsonl_observer.h"
#include "dptrain/train/logs/log_file.h"
#include "dptrain/train/logs/observers.h"
#include "dptrain/train/logs/report.h"
#include "dptrain/train/logs/summary_writer.h"
#include "dptrain/train/logs/tensorboard_observer.h"
#include "dptrain/train/logs/timeline.h"
#include "dptrain/train/metrics.h"
#include "dptrain/train/ps_server_role.h"
#include "dptrain/train/train_options.h"
#include "dptrain/train/evaluator.h"
#include "dptrain/train/trainer.h"
