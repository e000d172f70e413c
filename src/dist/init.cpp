#include "dptrain/dist/init.h"

#include <algorithm>
#include <iostream>
#include <vector>

#include <torch/cuda.h>
#include <torch/csrc/distributed/c10d/PrefixStore.hpp>

#include "dptrain/common/error.h"
#include "dptrain/common/job_token.h"
#include "dptrain/dist/backend_choice.h"
#include "dptrain/dist/admission.h"
#include "dptrain/dist/init_method.h"
#include "dptrain/dist/joining.h"
#include "dptrain/dist/rendezvous.h"

#if defined(DPTRAIN_WITH_GLOO)
#include <torch/csrc/distributed/c10d/ProcessGroupGloo.hpp>
#endif
#if defined(DPTRAIN_WITH_NCCL)
#include <c10/cuda/CUDAFunctions.h>
#include <torch/csrc/distributed/c10d/ProcessGroupNCCL.hpp>
#endif

namespace dpt::dist {

namespace {

// What this process sees of its node's GPUs, for the backend choice. `dptrain launch --gpus`
// marks the device list it gives each worker as that worker's own (DPTRAIN_OWN_GPUS).
GpuView gpu_view(const WorldInfo& world, const Environment& env) {
  GpuView view;
  view.rank = world.rank;
  view.local_rank = world.local_rank;
  view.local_world_size = world.local_world_size;
  view.visible_gpus = static_cast<int>(torch::cuda::device_count());
  view.own_gpus = env.get("DPTRAIN_OWN_GPUS").value_or("0") == "1";
#if defined(DPTRAIN_WITH_NCCL)
  view.nccl_built = true;
#endif
  return view;
}

bool is_loopback(const std::string& host) {
  return host == "localhost" || host.rfind("127.", 0) == 0 || host == "::1";
}

#if defined(DPTRAIN_WITH_GLOO)
compat::BackendPtr make_gloo(const compat::StorePtr& store, const WorldInfo& world, const std::string& master,
                             const std::optional<std::string>& interface, std::chrono::milliseconds timeout) {
  auto options = c10d::ProcessGroupGloo::Options::create(timeout);
  try {
    if (interface) {
      options->devices.push_back(c10d::ProcessGroupGloo::createDeviceForInterface(*interface));
    } else if (is_loopback(master)) {
      // A local job: loopback always works, while the host name may resolve to an address that
      // is not configured here (a common cause of Gloo "connect" failures in containers).
      options->devices.push_back(c10d::ProcessGroupGloo::createDeviceForHostname("127.0.0.1"));
    } else {
      options->devices.push_back(c10d::ProcessGroupGloo::createDefaultDevice());
    }
  } catch (const std::exception& e) {
    throw ConfigError(str("rank ", world.rank, ": cannot open a Gloo device",
                          interface ? " on interface '" + *interface + "'" : std::string(), ": ",
                          e.what(), ". Name an existing interface with --interface or GLOO_SOCKET_IFNAME."));
  }
  auto prefixed = c10::make_intrusive<c10d::PrefixStore>("gloo", store);
  try {
    return c10::make_intrusive<c10d::ProcessGroupGloo>(prefixed, world.rank, world.world_size, options);
  } catch (const std::exception& e) {
    throw DistError(str("rank ", world.rank, ": Gloo could not connect to its peers: ", e.what(),
                        ". If ranks run on different hosts, choose the network interface they share with "
                        "--interface or GLOO_SOCKET_IFNAME."));
  }
}
#endif

RendezvousOptions rendezvous_options(const InitOptions& options, const Environment& env) {
  std::chrono::milliseconds timeout = std::min(kDefaultRendezvousTimeout, options.timeout());
  if (options.rendezvous_timeout()) {
    timeout = *options.rendezvous_timeout();
  } else if (auto seconds = env.get_int("DPTRAIN_RENDEZVOUS_TIMEOUT")) {
    DPT_CHECK(*seconds > 0, ConfigError, "DPTRAIN_RENDEZVOUS_TIMEOUT must be a positive number of seconds, got ",
              *seconds);
    timeout = std::chrono::seconds(*seconds);
  }
  RendezvousOptions rendezvous(timeout);
  rendezvous.report = [](const std::string& line) { std::cerr << line << std::endl; };
  rendezvous.all_ranks_report = options.verbose_rendezvous();
  rendezvous.job_token = options.job_token() ? options.job_token() : env.get(kJobTokenVariable);
  DPT_CHECK(!rendezvous.job_token || !rendezvous.job_token->empty(), ConfigError, kJobTokenVariable,
            " is set but empty: give every process of the job the same token, or unset it");
  return rendezvous;
}

bool wants_shared_memory(const InitOptions& options, const Environment& env) {
  return options.shared_memory() && env.get("DPTRAIN_SHM").value_or("1") != "0";
}

bool wants_hierarchy(const InitOptions& options, const Environment& env) {
  return options.hierarchical() && env.get("DPTRAIN_HIERARCHICAL").value_or("1") != "0";
}

bool check_collectives(const InitOptions& options, const Environment& env) {
  return options.check_collectives() && env.get("DPTRAIN_CHECK_COLLECTIVES").value_or("1") != "0";
}

std::optional<std::string> gloo_interface(const InitOptions& options, const Environment& env) {
  auto interface = options.interface();
  if (!interface) interface = env.get("GLOO_SOCKET_IFNAME");
  if (interface && interface->empty()) interface.reset();
  return interface;
}

}  // namespace

std::shared_ptr<Communicator> init_process_group(const InitOptions& options, const Environment& env) {
  WorldInfo world = detect_world(env, options.world());
  const InitMethod method = parse_init_method(options.init_method());
  if (method.kind == InitMethod::Kind::Tcp) {
    world.master_addr = method.host;
    world.master_port = method.port;
  }
  // Before the rendezvous: a job NCCL cannot run stops here, on every rank, with the counts.
  const BackendChoice choice = choose_backend(options.backend(), gpu_view(world, env));
  if (!choice.note.empty() && world.local_rank == 0) std::cerr << choice.note << std::endl;
  const auto interface = gloo_interface(options, env);

  compat::StorePtr store = rendezvous(method, world, rendezvous_options(options, env));

  if (choice.backend == "gloo") {
#if defined(DPTRAIN_WITH_GLOO)
    auto gloo = make_gloo(store, world, world.master_addr, interface, options.timeout());
    // The machines' leaders' group of the hierarchical allreduce: Gloo on the job's interface.
    auto leaders = [world, interface, timeout = options.timeout()](const compat::StorePtr& group_store, int rank,
                                                                   int size) {
      WorldInfo group = world;
      group.rank = rank;
      group.world_size = size;
      return make_gloo(group_store, group, world.master_addr, interface, timeout);
    };
    return std::make_shared<Communicator>(std::move(gloo), world,
                                          CommunicatorOptions()
                                              .timeout(options.timeout())
                                              .store(store)
                                              .transport(transport::TransportOptions()
                                                             .shared_memory(wants_shared_memory(options, env))
                                                             .hierarchical(wants_hierarchy(options, env))
                                                             .group_backend(leaders)
                                                             .check_agreement(check_collectives(options, env))));
#else
    throw ConfigError("this build of dptrain has no Gloo backend (its headers were missing at build time); "
                      "install libgloo-dev and rebuild, or use --dist-backend nccl");
#endif
  }
#if defined(DPTRAIN_WITH_NCCL)
  DPT_ASSERT(choice.backend == "nccl", "choose_backend returns gloo or nccl");
  const auto device = static_cast<c10::DeviceIndex>(choice.device);
  // NCCL reads its interface from the environment only, and a library that changed its
  // process's environment would surprise the program around it: the caller exports it.
  const auto& asked = options.interface();
  DPT_CHECK(!asked || asked->empty() || env.get("NCCL_SOCKET_IFNAME") == asked, ConfigError, "rank ", world.rank,
            ": NCCL takes its network interface only from NCCL_SOCKET_IFNAME; export NCCL_SOCKET_IFNAME=",
            asked.value_or(""), " before starting (dptrain launch passes its environment on)");
  c10::cuda::set_device(device);
  auto nccl_options = c10d::ProcessGroupNCCL::Options::create();
  nccl_options->timeout = options.timeout();
  auto prefixed = c10::make_intrusive<c10d::PrefixStore>("nccl", store);
  auto nccl = c10::make_intrusive<c10d::ProcessGroupNCCL>(prefixed, world.rank, world.world_size, nccl_options);
  return std::make_shared<Communicator>(
      std::move(nccl), world,
      CommunicatorOptions().timeout(options.timeout()).device(at::Device(at::kCUDA, device)).store(store));
#else
  throw Error("choose_backend chose nccl in a build without it");
#endif
}

namespace {

// A Gloo communicator for `group` (its rank and size within it) on `store` under `name`.
std::shared_ptr<Communicator> gloo_group(const compat::StorePtr& store, const WorldInfo& group, const std::string& name,
                                         bool shared_memory, const InitOptions& options, const Environment& env) {
  DPT_CHECK(store, ConfigError, "rank ", group.rank, ": a new group needs the job's rendezvous store");
#if defined(DPTRAIN_WITH_GLOO)
  auto prefixed = c10::make_intrusive<c10d::PrefixStore>(name, store);
  auto gloo = make_gloo(prefixed, group, group.master_addr, gloo_interface(options, env), options.timeout());
  return std::make_shared<Communicator>(std::move(gloo), group,
                                        CommunicatorOptions()
                                            .timeout(options.timeout())
                                            .store(prefixed)
                                            .transport(transport::TransportOptions()
                                                           .shared_memory(shared_memory)
                                                           .check_agreement(check_collectives(options, env))));
#else
  throw ConfigError(
      "this build of dptrain has no Gloo backend (its headers were missing at build time); "
      "install libgloo-dev and rebuild");
#endif
}

// A Gloo group of the job that `was` describes, in which this rank is `group.rank` of
// `group.world_size` (regroup, grow, a replacement's join). The ranks of a job on one host stay on
// it, with shared memory; a job across hosts no longer knows how many of a group's members share
// this one, so it leaves shared memory out.
std::shared_ptr<Communicator> later_group(const WorldInfo& was, const compat::StorePtr& store, WorldInfo group,
                                          const std::string& name, const InitOptions& options, const Environment& env) {
  const bool one_host = was.local_world_size == was.world_size;
  group.local_world_size = one_host ? group.world_size : 0;
  group.local_rank = one_host ? group.rank : was.local_rank;
  return gloo_group(store, group, name, one_host && wants_shared_memory(options, env), options, env);
}

}  // namespace

std::shared_ptr<Communicator> new_group(const Communicator& world, int first, int size, const InitOptions& options,
                                        const Environment& env) {
  DPT_CHECK(
      first >= 0 && size >= 1 && first + size <= world.size() && world.rank() >= first && world.rank() < first + size,
      ConfigError, "rank ", world.rank(), " of ", world.size(), " cannot join a group of ranks [", first, ", ",
      first + size, ")");
  WorldInfo group = world.world();
  group.rank -= first;
  group.world_size = size;
  return gloo_group(world.store(), group, str("group", first, "+", size), /*shared_memory=*/false, options, env);
}

std::shared_ptr<Communicator> regroup(const Communicator& before, const std::vector<int>& members,
                                      const std::string& name, const InitOptions& options, const Environment& env) {
  const auto mine = std::find(members.begin(), members.end(), before.rank());
  DPT_CHECK(mine != members.end() && std::is_sorted(members.begin(), members.end()), ConfigError, "rank ",
            before.rank(), " cannot join a regrouped group it is not a member of");
  const WorldInfo& was = before.world();
  WorldInfo group = was;
  group.rank = static_cast<int>(mine - members.begin());
  group.world_size = static_cast<int>(members.size());
  auto comm = later_group(was, before.store(), group, name, options, env);
  if (before.abandonment()->armed()) comm->abandonment()->arm();
  return comm;
}

std::shared_ptr<Communicator> grow(const Communicator& before, const compat::StorePtr& store, int joining,
                                   const std::string& name, const InitOptions& options, const Environment& env) {
  DPT_CHECK(joining >= 1, ConfigError, "rank ", before.rank(), ": a group grows by one rank or more, not ", joining);
  WorldInfo group = before.world();
  group.world_size += joining;
  auto comm = later_group(before.world(), store, group, name, options, env);
  if (before.abandonment()->armed()) comm->abandonment()->arm();
  return comm;
}

JoinTicket admit_replacements(const Communicator& comm, c10d::Store& job_store, const std::vector<int>& members,
                              int generation, int64_t seen, int64_t asked, const InitOptions& options,
                              const Environment& env) {
  if (comm.rank() != 0) return ticket_for(job_store, asked);
  const RendezvousOptions rendezvous = rendezvous_options(options, env);
  const Admission admission =
      Admission::enter(job_store, "rank 0", AdmissionOptions("dpt/", rendezvous.timeout).token(rendezvous.job_token));
  JoinTicket ticket;
  ticket.generation = generation;
  ticket.requests = asked;
  ticket.members = members;
  for (const JoinRequest& ask : requests_between(job_store, seen, asked)) {
    if (admission.verify(replacement_place(ask.slot), ask.proof)) {
      ticket.members.push_back(ask.slot);
    } else {
      std::cerr << "rank 0: turned away a process that asked to join as the replacement of rank " << ask.slot
                << ": it does not hold this job's token" << std::endl;
      refuse(job_store, ask.number, "it does not hold the job's token (DPTRAIN_JOB_TOKEN, --job-token)");
    }
  }
  issue_tickets(job_store, ticket, seen);
  return ticket;
}

JoinedGroup join_running_group(const InitOptions& options, const Environment& env) {
  const WorldInfo world = detect_world(env, options.world());
  const std::string who = str("the replacement of rank ", world.rank);
  DPT_CHECK(world.store_outlives_ranks(), ConfigError, who, ": joining a running group needs a job's store that ",
            "outlives its ranks (dptrain launch --on-failure continue)");
  const RendezvousOptions rendezvous = rendezvous_options(options, env);
  compat::StorePtr store = connect_to_job_store(world, rendezvous);
  const Admission admission =
      Admission::enter(*store, who, AdmissionOptions("dpt/", rendezvous.timeout).token(rendezvous.job_token));
  // The launcher marked the rank it replaces failed: the mark is the lost worker's, not this one's.
  store->deleteKey(failed_worker_key(world.rank));
  const int64_t number = ask_to_join(*store, world.rank, admission.proof(replacement_place(world.rank)));
  const std::optional<JoinTicket> ticket = wait_for_ticket(*store, number, rendezvous.timeout);
  if (!ticket) throw RunEnded(str(who, ": the run ended before it was admitted; nothing left to do"));
  // The replacements come last: the last place with this slot is this process's.
  const auto mine = std::find(ticket->members.rbegin(), ticket->members.rend(), world.rank);
  DPT_CHECK(mine != ticket->members.rend(), DistError, who, ": the ticket issued for its ask (", ticket->encode(),
            ") does not name it");
  WorldInfo group = world;
  group.rank = static_cast<int>(ticket->members.rend() - mine) - 1;
  group.world_size = static_cast<int>(ticket->members.size());
  JoinedGroup joined;
  joined.comm = later_group(world, store, group, grown_group_name(ticket->generation), options, env);
  joined.job_store = std::move(store);
  joined.ticket = *ticket;
  return joined;
}

}  // namespace dpt::dist
