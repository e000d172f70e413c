#pragma once
// The dist layer: who am I, rendezvous, process groups and bounded collectives.
#include "dptrain/dist/collective.h"
#include "dptrain/dist/communicator.h"
#include "dptrain/dist/init.h"
#include "dptrain/dist/init_method.h"
#include "dptrain/dist/rendezvous.h"
#include "dptrain/dist/transport/transport.h"
#include "dptrain/dist/world.h"
