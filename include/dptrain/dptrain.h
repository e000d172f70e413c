#pragma once
// Everything dptrain offers, one include away.
#include "dptrain/common/environment.h"
#include "dptrain/common/error.h"
#include "dptrain/common/host_memory.h"
#include "dptrain/compat/compat.h"
#include "dptrain/data.h"
#include "dptrain/dist.h"
#include "dptrain/launch.h"
#include "dptrain/parallel.h"
#include "dptrain/models.h"
#include "dptrain/optim.h"
#include "dptrain/train.h"
