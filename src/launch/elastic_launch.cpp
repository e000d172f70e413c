#include "dptrain/launch/elastic_launch.h"

#include <torch/csrc/distributed/c10d/PrefixStore.hpp>
#include <torch/csrc/distributed/c10d/TCPStore.hpp>

#include <iostream>
#include <thread>
#include <vector>

#include "dptrain/common/error.h"
#include "dptrain/common/exit_codes.h"
#include "dptrain/compat/c10d_failure.h"
#include "dptrain/compat/tcp_store.h"
#include "dptrain/dist/etcd_store.h"
#include "dptrain/dist/rendezvous.h"
#include "dptrain/launch/node_rendezvous.h"
#include "dptrain/launch/supervise.h"

namespace dpt::launch {

namespace {

// A store on --master-addr:--master-port, served by the host (the launcher whose machine
// --master-addr names), reached by the others. `who` says what opens it and `whose` names the
// store, in its errors: the elastic launchers' store (the workers of each round meet on a port of
// their own), or the workers' store that launch_serving_store serves.
compat::StorePtr open_store(const LaunchOptions& options, bool host, const std::string& who,
                            const std::string& whose) {
  c10d::TCPStoreOptions tcp = compat::tcp_store_options();
  tcp.port = static_cast<std::uint16_t>(options.master_port());
  tcp.isServer = host;
  tcp.waitWorkers = false;
  tcp.timeout = options.rendezvous_timeout();
  const std::string where = str(options.master_addr(), ":", options.master_port());
  try {
    return compat::make_tcp_store(options.master_addr(), tcp);
  } catch (const std::exception& e) {
    const std::string cause = compat::short_message(e);
    DPT_CHECK(!host || compat::failure_cause(cause) != compat::FailureCause::AddressInUse, DistError, who,
              ": cannot serve ", whose, " on ", where,
              ": the port is busy. Pick a free --master-port or stop the process that holds it. (", cause, ")");
    throw DistError(str(who, ": ", host ? "cannot serve" : "cannot reach", " ", whose, " at ", where,
                        ". Start the launcher on the machine --master-addr names (it hosts the rendezvous), ",
                        "and check the address and port from here. (", cause, ")"));
  }
}

// The next round; a store that stops answering means the host launcher is gone.
std::optional<Membership> next_round_of(NodeRendezvous& rendezvous, const LaunchOptions& options) {
  try {
    return rendezvous.next_round();
  } catch (const Error&) {
    throw;
  } catch (const std::exception& e) {
    throw DistError(str("elastic rendezvous: the launchers' store at ", options.master_addr(), ":",
                        options.master_port(), " stopped answering, so the launcher that hosts it is gone; the job ",
                        "cannot re-form without it. Start the job again (--resume auto continues from the last ",
                        "checkpoint). (", compat::short_message(e), ")"));
  }
}

void say(const std::string& line) { std::cerr << "dptrain launch: " << line << std::endl; }

// An elastic job's rounds: the launchers meet in the node rendezvous, and each round is the world
// it formed (node_rendezvous.h).
class ElasticMembership : public JobMembership {
 public:
  ElasticMembership(LaunchOptions options, bool host)
      : options_(std::move(options)),
        host_(host),
        rendezvous_(open_store(options_, host, "elastic rendezvous", "the launchers' store"), host, options_.run_id(),
                    NodeRendezvousOptions(*options_.min_nnodes(), options_.nnodes())
                        .last_call(options_.last_call())
                        .timeout(options_.rendezvous_timeout())
                        .choose_worker_port([this] { return free_port(options_.master_addr()); })
                        .job_token(options_.job_token())
                        .address(str(options_.master_addr(), ":", options_.master_port()))
                        .report(say)) {}

  std::optional<Round> next_round() override {
    const auto membership = next_round_of(rendezvous_, options_);
    if (!membership) return std::nullopt;
    say(str("round ", membership->round, ": ", membership->nnodes, " node(s), this one is node ",
            membership->node_rank));
    return Round{LaunchOptions(options_)
                     .nnodes(membership->nnodes)
                     .node_rank(membership->node_rank)
                     .master_port(membership->master_port)
                     .min_nnodes(std::nullopt),
                 membership->round};
  }
  bool reformation_due() override { return rendezvous_.reformation_due(); }
  void succeeded() override {
    if (!host_) return;
    rendezvous_.finish();
    // Long enough for a node waiting for the next round to read that there is none.
    std::this_thread::sleep_for(std::chrono::seconds(1));
  }
  void failed(bool interrupted) override {
    // An interrupted host takes the rendezvous with it: the others learn it from the next round.
    if (interrupted && host_) return;
    try {
      rendezvous_.request_reformation();  // the others re-form, without this node if it is gone
    } catch (const std::exception&) {
      // A host that is gone is reported by the next round instead.
    }
  }
  // Workers that stopped on request (a node left gracefully, or the re-formation another launcher
  // began reached them first) wrote a checkpoint: the next round continues from it.
  bool stop_on_request_ends_job() const override { return false; }
  std::string after_giving_up() const override { return "; the other nodes continue without this one"; }

 private:
  LaunchOptions options_;
  bool host_;
  NodeRendezvous rendezvous_;
};

}  // namespace

int launch_serving_store(const LaunchOptions& requested, const std::vector<std::string>& program,
                         const Environment& env) {
  check_program(program);
  // Resolved once: --standalone's port is chosen here, and the store must be on the one the
  // workers are told.
  const LaunchOptions options = resolve(requested, env).standalone(false);
  // Node 0 serves it, and the workers of every node join it there; or an etcd cluster holds it,
  // where every node's launcher marks its own workers.
  compat::StorePtr store;
  if (!options.etcd_endpoints().empty()) {
    store = c10::make_intrusive<dist::EtcdStore>(
        dist::EtcdStoreOptions(options.etcd_endpoints(), dist::etcd_job_prefix(options.run_id()))
            .timeout(options.rendezvous_timeout()));
  } else if (options.node_rank() == 0) {
    store = open_store(options, /*host=*/true, "dptrain launch", "the workers' store");
  }
  // A worker seen to fail is marked in the store at once: the ranks left close their list without
  // waiting for it (dist/reformation.h), where a heartbeat would take its whole bound to name it.
  return launch_fixed_world(options, program, env, [store](int round, int rank) {
    if (!store) return;
    try {
      c10d::PrefixStore round_store(dist::agent_round_prefix(round), store);
      round_store.set(dist::failed_worker_key(rank), std::vector<uint8_t>{'1'});
    } catch (const std::exception&) {
      // The mark only saves time: the ranks left wait out their window without it.
    }
  });
}

int launch_elastic(const LaunchOptions& requested, const std::vector<std::string>& program, const Environment& env) {
  DPT_CHECK(requested.min_nnodes().has_value(), ConfigError, "launch_elastic needs min_nnodes (--nnodes MIN:MAX)");
  check_program(program);
  const LaunchOptions options = resolve(requested, env);
  const bool host = is_local_address(options.master_addr());
  say(str("elastic job of ", *options.min_nnodes(), " to ", options.nnodes(), " node(s) of ",
          *options.nproc_per_node(), " worker(s), run id ", options.run_id(), "; this node ",
          host ? "hosts the rendezvous on " : "joins the rendezvous at ", options.master_addr(), ":",
          options.master_port()));
  ElasticMembership rounds(options, host);
  return supervise(rounds, program, env);
}

}  // namespace dpt::launch
