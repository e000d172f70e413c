#pragma once
// Starting a process group: detect the world, rendezvous, create the backend.
//
//   auto comm = dpt::dist::init_process_group();   // under dptrain launch, torchrun, srun, mpirun
//   auto comm = dpt::dist::init_process_group(
//       dpt::dist::InitOptions().init_method("tcp://10.0.0.1:23456").backend("gloo"));

#include <chrono>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include <torch/arg.h>

#include "dptrain/common/environment.h"
#include "dptrain/dist/communicator.h"
#include "dptrain/dist/joining.h"
#include "dptrain/dist/world.h"

namespace dpt::dist {

// A rendezvous gives up after 5 minutes unless told otherwise: long enough for every node of a
// batch job to start (torchrun's join timeout is 10), short enough that a rank started alone
// fails while its user is still watching, unlike the collective timeout's half hour.
constexpr std::chrono::milliseconds kDefaultRendezvousTimeout = std::chrono::minutes(5);

struct InitOptions {
  // "gloo", "nccl", or "auto": nccl when this build has it and CUDA devices exist, else gloo.
  TORCH_ARG(std::string, backend) = "auto";
  // env://, tcp://host:port or file:///path.
  TORCH_ARG(std::string, init_method) = "env://";
  // Flags that override what the environment says about rank, world size and master.
  TORCH_ARG(WorldOverrides, world) = {};
  // Bound on every collective.
  TORCH_ARG(std::chrono::milliseconds, timeout) = kDefaultTimeout;
  // Bound on the rendezvous: reaching the master and waiting for every rank to join. Unset:
  // DPTRAIN_RENDEZVOUS_TIMEOUT (seconds) from the environment (`dptrain launch
  // --rendezvous-timeout` sets it for its workers), else kDefaultRendezvousTimeout or `timeout`,
  // whichever is shorter. While ranks are missing, rank 0 says which, every few seconds, on stderr.
  TORCH_ARG(std::optional<std::chrono::milliseconds>, rendezvous_timeout) = std::nullopt;
  // The job's secret, checked before this process may take a rank (dist/admission.h). Unset:
  // DPTRAIN_JOB_TOKEN from the environment (`dptrain launch` sets it for its workers), else none.
  TORCH_ARG(std::optional<std::string>, job_token) = std::nullopt;
  // Every rank reports the rendezvous' progress, not only rank 0.
  TORCH_ARG(bool, verbose_rendezvous) = false;
  // Network interface for the backend's connections. Gloo: unset means GLOO_SOCKET_IFNAME, then
  // loopback for a local master, else the address this host's name resolves to. NCCL reads only
  // NCCL_SOCKET_IFNAME from the environment: an interface named here must be the one it names.
  TORCH_ARG(std::optional<std::string>, interface) = std::nullopt;
  // When every rank is on this host (LOCAL_WORLD_SIZE equals WORLD_SIZE), Gloo's float all_reduce
  // goes through /dev/shm (transport/shm/allreduce.h). DPTRAIN_SHM=0 in the environment turns it
  // off as well; Communicator::transport() says which is in use, or why shared memory is not.
  TORCH_ARG(bool, shared_memory) = true;
  // When the job's ranks span machines and a machine runs several of them, Gloo's float all_reduce
  // goes through shared memory on each machine first and across machines by one rank of each
  // (transport/hierarchical/transport.h). DPTRAIN_HIERARCHICAL=0 in the environment turns it off
  // as well (so does DPTRAIN_SHM=0); every rank must agree, else none takes it.
  TORCH_ARG(bool, hierarchical) = true;
  // Over Gloo, every collective first compares every rank's record of it (step, operation,
  // shape), so that a skipped collective or a shape that differs fails at once and names each
  // rank's (CommunicatorOptions::check_agreement). DPTRAIN_CHECK_COLLECTIVES=0 turns it off.
  TORCH_ARG(bool, check_collectives) = true;
};

// Joins the process group described by `options` and the environment. A world of one process
// still gets a working Communicator, so single- and multi-process code paths are the same.
std::shared_ptr<Communicator> init_process_group(const InitOptions& options = InitOptions(),
                                                 const Environment& env = Environment::current());

// A communicator over the ranks [first, first + size) of `world`'s job, on its rendezvous store,
// for jobs whose processes take different roles (the parameter server's workers). Collective over
// those ranks only; they become ranks 0 .. size-1 of the group. `options` gives the timeout and
// network interface, as to init_process_group. Gloo, without the shared-memory all_reduce.
std::shared_ptr<Communicator> new_group(const Communicator& world, int first, int size,
                                        const InitOptions& options = InitOptions(),
                                        const Environment& env = Environment::current());

// A communicator over the ranks `members` (ascending ranks of `before`) that go on after `before`
// lost the others (reformation.h): collective over `members` only, on `before`'s store under the
// prefix `name`, which every member passes alike and no earlier group used. Gloo, as
// init_process_group made `before`'s, shared memory included where `before` had every rank on
// this host. Its abandonment (abandonment.h) is armed as `before`'s was.
std::shared_ptr<Communicator> regroup(const Communicator& before, const std::vector<int>& members,
                                      const std::string& name, const InitOptions& options = InitOptions(),
                                      const Environment& env = Environment::current());

// A communicator over `before`'s members, keeping their ranks, and `joining` replacements after
// them (joining.h), formed on `store` (the job's store as the ranks joined it, which the
// replacements reach too) under `name` (grown_group_name of the ticket's generation): collective
// over the grown group, each replacement calling join_running_group. Its abandonment is armed as
// `before`'s was.
std::shared_ptr<Communicator> grow(const Communicator& before, const compat::StorePtr& store, int joining,
                                   const std::string& name, const InitOptions& options = InitOptions(),
                                   const Environment& env = Environment::current());

// Called by every rank of a running group at the step boundary where each knows that `asked`
// replacements have asked (joining.h; `seen` of them admitted before): rank 0 checks each new
// ask's proof of the job's token (admission.h), refuses those that do not hold it, and issues
// the ticket of re-formation `generation`; every rank returns that ticket. `members`: the group's
// slots now, in rank order. A ticket whose members are `members` admits nobody.
JoinTicket admit_replacements(const Communicator& comm, c10d::Store& job_store, const std::vector<int>& members,
                              int generation, int64_t seen, int64_t asked, const InitOptions& options = InitOptions(),
                              const Environment& env = Environment::current());

// What a replacement joined: the grown group, the job's store (its round's namespace) and the
// ticket that admitted it.
struct JoinedGroup {
  std::shared_ptr<Communicator> comm;
  compat::StorePtr job_store;
  JoinTicket ticket;
};

// A replacement's start (WorldInfo::replacement), in place of init_process_group: asks the running
// group to admit it, waits for its ticket within the rendezvous' bound, and joins the grown group.
// Its rank is its place in the ticket's members. RunEnded when the run ended before admitting it.
JoinedGroup join_running_group(const InitOptions& options = InitOptions(),
                               const Environment& env = Environment::current());

}  // namespace dpt::dist
