#include "dptrain/launch/elastic_launch.h"

#include <torch/csrc/distributed/c10d/TCPStore.hpp>

#include <iostream>
#include <thread>

#include "dptrain/common/error.h"
#include "dptrain/common/exit_codes.h"
#include "dptrain/compat/c10d_failure.h"
#include "dptrain/compat/tcp_store.h"
#include "dptrain/launch/node_rendezvous.h"

namespace dpt::launch {

namespace {

// The launchers' store: served by the host (the launcher whose machine --master-addr names), on
// --master-port; the workers of each round meet on a port of their own.
compat::StorePtr connect_node_store(const LaunchOptions& options, bool host) {
  c10d::TCPStoreOptions tcp = compat::tcp_store_options();
  tcp.port = static_cast<std::uint16_t>(options.master_port());
  tcp.isServer = host;
  tcp.waitWorkers = false;
  tcp.timeout = options.rendezvous_timeout();
  const std::string where = str(options.master_addr(), ":", options.master_port());
  try {
    return c10::make_intrusive<c10d::TCPStore>(options.master_addr(), tcp);
  } catch (const std::exception& e) {
    const std::string cause = compat::short_message(e);
    DPT_CHECK(!host || compat::failure_cause(cause) != compat::FailureCause::AddressInUse, DistError,
              "elastic rendezvous: cannot serve the launchers' store on ", where,
              ": the port is busy. Pick a free --master-port or stop the process that holds it. (", cause, ")");
    throw DistError(str("elastic rendezvous: ", host ? "cannot serve" : "cannot reach", " the launchers' store at ",
                        where, ". Start the launcher on the machine --master-addr names (it hosts the rendezvous), ",
                        "and check the address and port from here. (", cause, ")"));
  }
}

// The next round; a store that stops answering means the host launcher is gone.
std::optional<Membership> next_round(NodeRendezvous& rendezvous, const LaunchOptions& options) {
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

// Asks the other nodes to re-form; a host that is gone is reported by the next round instead.
void request_reformation(NodeRendezvous& rendezvous) {
  try {
    rendezvous.request_reformation();
  } catch (const std::exception&) {
  }
}

void say(const std::string& line) { std::cerr << "dptrain launch: " << line << std::endl; }

}  // namespace

int launch_elastic(const LaunchOptions& requested, const std::vector<std::string>& program, const Environment& env) {
  DPT_CHECK(requested.min_nnodes().has_value(), ConfigError, "launch_elastic needs min_nnodes (--nnodes MIN:MAX)");
  const LaunchOptions options = resolve(requested, env);
  const bool host = is_local_address(options.master_addr());
  say(str("elastic job of ", *options.min_nnodes(), " to ", options.nnodes(), " node(s) of ",
          *options.nproc_per_node(), " worker(s), run id ", options.run_id(), "; this node ",
          host ? "hosts the rendezvous on " : "joins the rendezvous at ", options.master_addr(), ":",
          options.master_port()));
  NodeRendezvous rendezvous(connect_node_store(options, host), host, options.run_id(),
                            NodeRendezvousOptions(*options.min_nnodes(), options.nnodes())
                                .last_call(options.last_call())
                                .timeout(options.rendezvous_timeout())
                                .choose_worker_port([&options] { return free_port(options.master_addr()); })
                                .report(say));
  int failures = 0;
  while (const auto membership = next_round(rendezvous, options)) {
    const LaunchOptions round = LaunchOptions(options)
                                    .nnodes(membership->nnodes)
                                    .node_rank(membership->node_rank)
                                    .master_port(membership->master_port)
                                    .min_nnodes(std::nullopt);
    say(str("round ", membership->round, ": ", membership->nnodes, " node(s), this one is node ",
            membership->node_rank));
    std::cerr << describe_workers(round);
    WorkerGroup group(make_worker_specs(round, program, env, membership->round),
                      SupervisorOptions()
                          .grace_period(options.grace_period())
                          .stop_when([&rendezvous] { return rendezvous.reformation_due(); }));
    const GroupResult result = group.run();
    if (result.succeeded()) {
      if (host) {
        rendezvous.finish();
        // Long enough for a node waiting for the next round to read that there is none.
        std::this_thread::sleep_for(std::chrono::seconds(1));
      }
      return 0;
    }
    if (result.outcome == GroupResult::Outcome::Stopped) {
      say(str("round ", membership->round, " ends: a node failed or one waits to join; re-forming"));
      continue;
    }
    say(result.report());
    if (result.outcome == GroupResult::Outcome::Interrupted) {
      if (!host) request_reformation(rendezvous);  // the others continue without this node
      return result.exit_code;
    }
    request_reformation(rendezvous);
    // Workers that stopped on request (a node left gracefully, or the re-formation another
    // launcher began reached them first) wrote a checkpoint: nothing failed.
    if (result.exit_code == kExitStoppedOnRequest) continue;
    if (++failures > options.max_restarts()) {
      say(str("giving up after ", options.max_restarts(), " restart(s); the other nodes continue without this one"));
      return result.exit_code;
    }
    say(str("re-forming (restart ", failures, " of ", options.max_restarts(), ")"));
  }
  say("the job finished while this node waited for a round");
  return 0;
}

}  // namespace dpt::launch
