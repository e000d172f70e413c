#pragma once
// How the launchers of an elastic job (`dptrain launch --nnodes MIN:MAX`) agree, round after round,
// on which nodes train together.
//
//   dpt::launch::NodeRendezvous rendezvous(store, /*host=*/true, run_id, options);
//   while (auto membership = rendezvous.next_round()) {
//     ... start this node's workers with membership->node_rank, nnodes, master_port ...
//     ... while they run: if (rendezvous.reformation_due()) stop them (they checkpoint) ...
//     ... when they fail: rendezvous.request_reformation() ...
//   }
//
// One launcher is the host: it serves the store (on --master-addr:--master-port) and is node 0 of
// every round, so the workers' rank 0 (which writes checkpoints and serves the workers' own store)
// lives where the job's address points. The others join a round by taking the next guest number.
// The host closes a round when MAX nodes have joined, or `last_call` after MIN have: the first
// MAX - 1 guests are its nodes, later ones wait for the next round. While a round trains, any
// launcher whose workers fail asks for a re-formation, and a guest waiting for a round with room
// asks for one too: every launcher then stops its workers (a stop on request: they agree on a step
// and write a checkpoint), and the nodes still alive form the next round, which resumes from that
// checkpoint. Only the host is indispensable, as with torchrun's c10d rendezvous: when it is gone
// the others stop with an error that says so. Before a guest takes a number, its job token is
// checked against the host's (dist/admission.h): a launcher of another job is turned away, and
// the host logs it.

#include <chrono>
#include <functional>
#include <optional>
#include <string>

#include <torch/arg.h>

#include "dptrain/compat/compat.h"
#include "dptrain/dist/admission.h"

namespace dpt::launch {

struct NodeRendezvousOptions {
  NodeRendezvousOptions(int min_nodes, int max_nodes) : min_nodes_(min_nodes), max_nodes_(max_nodes) {}
  // A round needs at least min_nodes and takes at most max_nodes.
  TORCH_ARG(int, min_nodes);
  TORCH_ARG(int, max_nodes);
  // Once min_nodes have joined, how long the host keeps the round open for more.
  TORCH_ARG(std::chrono::milliseconds, last_call) = std::chrono::seconds(3);
  // How long a round may wait for min_nodes, and a guest for the host's answer.
  TORCH_ARG(std::chrono::milliseconds, timeout) = std::chrono::minutes(5);
  // Host only: a free port on the host for each round's workers to meet at.
  TORCH_ARG(std::function<int()>, choose_worker_port);
  // The job's secret: a launcher joins the rendezvous only when it holds the host's (or both hold
  // none), as dist/admission.h checks.
  TORCH_ARG(std::optional<std::string>, job_token) = std::nullopt;
  // Where the host serves the store ("10.0.0.1:29400"), for messages.
  TORCH_ARG(std::string, address) = "";
  // Receives one line per event worth a log line (a last call begun, a round formed, a node
  // waiting, a launcher turned away). Empty: silent.
  TORCH_ARG(std::function<void(const std::string&)>, report);
};

// This node's place in one round.
struct Membership {
  int round = 0;
  int node_rank = 0;
  int nnodes = 1;
  int master_port = 0;  // where this round's workers meet, on the host
};

class NodeRendezvous {
 public:
  NodeRendezvous(compat::StorePtr store, bool host, std::string run_id, NodeRendezvousOptions options);

  // Joins the next round and returns this node's place in it, waiting through rounds that are
  // already full. Empty when the job finished while this node waited. Throws TimeoutError when too
  // few nodes come, DistError when the host is gone.
  std::optional<Membership> next_round();
  // While the current round trains: whether it should end for a re-formation (some launcher asked,
  // or a node is waiting and the round has room). Reads the store at most once a second.
  bool reformation_due();
  // This node's workers failed or stopped: every node of the round should re-form.
  void request_reformation();
  // Host: the job is done; guests still waiting for a round go home.
  void finish();

 private:
  std::string key(const std::string& name) const;
  std::string round_key(int round, const std::string& name) const;
  int64_t read_int(const std::string& key);
  void write_int(const std::string& key, int64_t value);
  bool exists(const std::string& key);
  int64_t count(const std::string& key) { return store_->add(key, 0); }
  Membership host_round();
  std::optional<Membership> guest_round();
  void report(const std::string& line) const;
  // Host: logs the launchers turned away since the last call.
  void report_refusals();

  compat::StorePtr store_;
  bool host_;
  std::string prefix_;
  NodeRendezvousOptions options_;
  dist::Admission admission_;
  std::optional<Membership> current_;
  std::chrono::steady_clock::time_point next_poll_{};
};

}  // namespace dpt::launch
