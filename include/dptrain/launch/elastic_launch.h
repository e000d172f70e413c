#pragma once
// `dptrain launch --nnodes MIN:MAX`: torchrun's elastic launch. The launchers meet in rounds (see
// node_rendezvous.h); each round's workers are an ordinary group with the torchrun environment for
// that round's world. When a node is lost, the others re-form without it after
// LaunchOptions::last_call; a node that (re)joins is admitted at a re-formation it asks for. Each
// re-formation stops the workers on request, so they agree on a step and write a checkpoint, and
// the next round's workers (dptrain train --resume auto) continue from it at the new world size.
//
//   auto options = dpt::launch::LaunchOptions().min_nnodes(2).nnodes(3).master_addr("10.0.0.1");
//   int code = dpt::launch::launch_elastic(options, {"dptrain", "train", "--resume", "auto", ...},
//                                          dpt::Environment::current());
//
// Failed rounds count against max_restarts; re-formations that admit or lose a node do not.
// Separate from launch() because the rendezvous needs LibTorch's c10d store, which the light
// `dptrain launch` binary does not load.

#include <string>
#include <vector>

#include "dptrain/common/environment.h"
#include "dptrain/launch/launcher.h"

namespace dpt::launch {

// Runs `program` as this node's workers of an elastic job until the job finishes. Returns the
// launcher's exit code as launch() does.
int launch_elastic(const LaunchOptions& options, const std::vector<std::string>& program, const Environment& env);

// `dptrain launch --on-failure continue`: launch()'s fixed world, with the workers' rendezvous
// store served by this launcher when it is node 0 (on --master-addr:--master-port, which the
// workers join as torchrun's agent store), or kept in an etcd cluster (LaunchOptions::
// etcd_endpoints), where every node's launcher marks its own failed workers. The store then
// outlives every worker, rank 0 included (with etcd, every machine), and the ranks left after a
// loss meet in it to go on (dist/reformation.h), as replacements do to join them (dist/joining.h).
int launch_serving_store(const LaunchOptions& options, const std::vector<std::string>& program,
                         const Environment& env);

}  // namespace dpt::launch
