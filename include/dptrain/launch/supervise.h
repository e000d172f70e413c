#pragma once
// The one loop that runs a job's local workers, round after round, as torchrun's agent does
// (SimpleElasticAgent._invoke_run): start the round's group, watch it, and on its end succeed,
// give up, or begin the next round. A JobMembership decides the rounds: a static launch repeats
// one world until its restarts are spent (launcher.h); an elastic launch re-forms the world
// whenever a node leaves or asks to join (elastic_launch.h).
//
//   class MyRounds : public dpt::launch::JobMembership { ... };
//   MyRounds rounds;
//   int code = dpt::launch::supervise(rounds, program, env);   // the launcher's exit code
//
// Failed rounds count against LaunchOptions::max_restarts; rounds a membership stops on purpose
// (a re-formation) do not.

#include <optional>
#include <string>
#include <vector>

#include "dptrain/common/environment.h"
#include "dptrain/launch/launcher.h"

namespace dpt::launch {

// One round of a job: the world its workers form.
struct Round {
  LaunchOptions options;  // resolved, with this round's nodes, node rank and workers' port
  int number = 0;         // 0 for the first; the workers see it as TORCHELASTIC_RESTART_COUNT
};

class JobMembership {
 public:
  virtual ~JobMembership() = default;
  // The next round, or nullopt once the job has finished without this node.
  virtual std::optional<Round> next_round() = 0;
  // Asked while a round runs: true stops its workers on request, to begin the next round.
  virtual bool reformation_due() { return false; }
  // Every worker of the round succeeded: the job is done.
  virtual void succeeded() {}
  // The round failed here, or (`interrupted`) this launcher was told to stop.
  virtual void failed(bool interrupted) {}
  // Under OnFailure::Continue, the worker of global rank `rank` ended with a failure while the
  // others go on (round `round`).
  virtual void worker_lost(int round, int rank) {}
  // Whether workers that stopped on request (exit 75: they wrote a checkpoint) end the job (a
  // static launch: the signal that reached them was for the whole job) or let the next round
  // continue from their checkpoint (an elastic launch: a re-formation stopped them).
  virtual bool stop_on_request_ends_job() const = 0;
  // After the last restart was spent: what becomes of the job beyond this node, if anything.
  virtual std::string after_giving_up() const { return ""; }
};

// Runs `program`'s workers for each round of `membership` until the job succeeds, is
// interrupted, or fails more than max_restarts times. Prints what happens to stderr; returns the
// launcher's exit code (0, the failing worker's code, or 128 + signal).
int supervise(JobMembership& membership, const std::vector<std::string>& program, const Environment& env);

}  // namespace dpt::launch
