#pragma once
// Rendezvous: every rank meets every other through a c10d store before any collective runs.
//
// dptrain's join protocol on top of the store makes the usual ways a job goes wrong fail fast and
// by name, instead of PyTorch's silent wait: two processes claiming one rank, ranks started with
// different world sizes, a rank that never arrives (named, with the time waited), a busy port on
// the master, and a master that cannot be reached. Before a process takes a rank, its job token is
// checked (admission.h): a process of another job, or one without the token, is turned away and
// the job goes on.

#include <chrono>
#include <optional>
#include <string>

#include "dptrain/compat/compat.h"
#include "dptrain/dist/init_method.h"
#include "dptrain/dist/world.h"

namespace dpt::dist {

// A line of progress while the rendezvous waits (see RendezvousOptions::report).
using RendezvousReport = std::function<void(const std::string& line)>;

struct RendezvousOptions {
  explicit RendezvousOptions(std::chrono::milliseconds timeout) : timeout(timeout) {}
  std::chrono::milliseconds timeout;  // bound on connecting and on waiting for every rank
  // Where the ranks meet ("10.0.0.1:29500", "file:///shared/rdzv"), for messages.
  std::string address;
  // The job's secret (DPTRAIN_JOB_TOKEN); unset: a job without one, which admits only processes
  // without one.
  std::optional<std::string> job_token;
  // Receives progress while the wait lasts: first after `first_report`, then at doubling intervals
  // (at most a minute apart). Rank 0 reports who has joined and who is missing; other ranks report
  // that only when `all_ranks_report`, but always report a master they cannot reach, since nobody
  // else can. Empty: silent.
  RendezvousReport report;  // (rank 0 also reports each process it turned away)
  std::chrono::milliseconds first_report = std::chrono::seconds(2);
  bool all_ranks_report = false;
};

// Creates the store `method` names and joins this rank into it. Returns once all ranks have
// joined; throws ConfigError, DistError or TimeoutError naming this rank and the cause otherwise.
compat::StorePtr rendezvous(const InitMethod& method, const WorldInfo& world,
                            const RendezvousOptions& options);

// The job's store where it outlives the ranks (WorldInfo::store_outlives_ranks: a launcher serves
// it, or an etcd cluster holds it), in the round's namespace, reached without taking a place: a replacement joins a running group there
// (init.h's join_running_group). Errors as rendezvous()'s.
compat::StorePtr connect_to_job_store(const WorldInfo& world, const RendezvousOptions& options);

// The namespace of round `restart_count`'s workers in torchrun's agent store (the one PyTorch's
// workers use): a launcher that serves the store writes there what the round's workers read.
std::string agent_round_prefix(int restart_count);

// Where a launcher that serves the workers' store marks a worker it saw fail (its global rank),
// within the round's namespace: the ranks left need not wait for it (reformation.h).
std::string failed_worker_key(int rank);

// The join protocol alone, over any store (an in-memory HashStore in tests).
void join(c10d::Store& store, const WorldInfo& world, const RendezvousOptions& options);

}  // namespace dpt::dist
