#pragma once
// The launch layer: start, watch, signal, tear down and restart local worker processes.
#include "dptrain/launch/launcher.h"
#include "dptrain/launch/worker_group.h"
