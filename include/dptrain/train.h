#pragma once
// The train layer: the training loop and its styles (train/), learning-rate schedules, loss
// scaling and distributed metrics; checkpoint files with exact resume (train/checkpoint/); the
// progress and metrics logs: console, JSONL, TensorBoard, per-rank timelines, the HTML report
// (train/logs/).
#include "dptrain/train/batch_mixing.h"
#include "dptrain/train/checkpoint/auto_resume.h"
#include "dptrain/train/checkpoint/checkpoint_file.h"
#include "dptrain/train/checkpoint/optimizer_state.h"
#include "dptrain/train/checkpoint/training_checkpoint.h"
#include "dptrain/train/grad_scaler.h"
#include "dptrain/train/stop_signals.h"
#include "dptrain/train/logs/console_observer.h"
#include "dptrain/train/logs/jsonl_observer.h"
#include "dptrain/train/logs/log_file.h"
#include "dptrain/train/logs/observers.h"
#include "dptrain/train/logs/report.h"
#include "dptrain/train/logs/run_report.h"
#include "dptrain/train/logs/summary_writer.h"
#include "dptrain/train/logs/tensorboard_observer.h"
#include "dptrain/train/logs/timeline.h"
#include "dptrain/train/lr_schedule.h"
#include "dptrain/train/metrics.h"
#include "dptrain/train/model_ema.h"
#include "dptrain/train/optimizer.h"
#include "dptrain/train/ps_server_role.h"
#include "dptrain/train/train_options.h"
#include "dptrain/train/trainer.h"
