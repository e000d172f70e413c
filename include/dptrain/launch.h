#pragma once
// The launch layer: start, watch, signal, tear down and restart local worker processes.
#include "dptrain/launch/launcher.h"
#include "dptrain/launch/spawn.h"
#include "dptrain/launch/visible_gpus.h"
#include "dptrain/launch/worker_group.h"
