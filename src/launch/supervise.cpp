#include "dptrain/launch/supervise.h"

#include <chrono>
#include <iostream>

#include "dptrain/common/error.h"
#include "dptrain/common/exit_codes.h"
#include "dptrain/common/on_failure.h"
#include "dptrain/common/round_end.h"
#include "dptrain/launch/worker_group.h"

namespace dpt::launch {

namespace {

void say(const std::string& line) { std::cerr << "dptrain launch: " << line << std::endl; }

// The environment of the next round's workers: `env`, and what ended the round before and when.
Environment after_round(const Environment& env, const std::string& cause) {
  Environment next = env;
  next.set(kRoundEndCauseVariable, cause);
  const auto now = std::chrono::steady_clock::now().time_since_epoch();
  next.set(kRoundEndTimeVariable, std::to_string(std::chrono::duration_cast<std::chrono::nanoseconds>(now).count()));
  return next;
}

}  // namespace

int supervise(JobMembership& membership, const std::vector<std::string>& program, const Environment& env) {
  int failures = 0;
  int replaced = 0;  // workers started in place of lost ones (--on-failure continue)
  Environment round_env = env;
  while (const auto round = membership.next_round()) {
    const LaunchOptions& options = round->options;
    std::cerr << describe_workers(options);
    WorkerGroup group(make_worker_specs(options, program, round_env, round->number),
                      SupervisorOptions()
                          .grace_period(options.grace_period())
                          .stop_when([&membership] { return membership.reformation_due(); })
                          .keep_survivors(options.on_failure() == OnFailure::Continue)
                          .on_lost([&](const WorkerExit& lost) {
                            if (lost.left_behind) {
                              say(str(lost.name, " (pid ", lost.pid, ") still runs a grace period after the others ",
                                      "finished without it: stopping it"));
                              return;
                            }
                            say(str(lost.name, " (pid ", lost.pid, ") ",
                                    lost.signal != 0 ? str("was killed by signal ", lost.signal)
                                                     : str("exited with status ", lost.exit_code),
                                    "; the other workers go on without it (--on-failure continue)"));
                            membership.worker_lost(
                                round->number, options.node_rank() * *options.nproc_per_node() +
                                                   static_cast<int>(lost.index));
                          })
                          .replace([&](WorkerSpec& spec, const WorkerExit& lost) {
                            // Counted with the restarts: --max-restarts bounds the processes started
                            // after a failure, whichever way.
                            if (failures + replaced >= options.max_restarts()) return false;
                            ++replaced;
                            spec.env[kReplacementVariable] = "1";
                            say(str("starting a replacement for ", lost.name, " (", replaced, " of ",
                                    options.max_restarts(), "), to join the workers that went on"));
                            return true;
                          }));
    const GroupResult result = group.run();
    if (result.succeeded()) {
      membership.succeeded();
      return 0;
    }
    if (result.outcome == GroupResult::Outcome::Stopped) {
      say(str("round ", round->number, " ends: a node failed or one waits to join; re-forming"));
      round_env = after_round(env, "a node failed or one waited to join: the round was stopped to re-form");
      continue;
    }
    say(result.report());
    const bool interrupted = result.outcome == GroupResult::Outcome::Interrupted;
    membership.failed(interrupted);
    if (interrupted) return result.exit_code;
    if (result.exit_code == kExitStoppedOnRequest) {
      if (membership.stop_on_request_ends_job()) return result.exit_code;
      round_env = after_round(env, "its workers stopped on request, to re-form, and wrote a checkpoint");
      continue;  // its checkpoint is where the next round starts: nothing failed
    }
    if (++failures > options.max_restarts()) {
      if (options.max_restarts() > 0) {
        say(str("giving up after ", options.max_restarts(), " restart(s)", membership.after_giving_up()));
      }
      if (options.log_dir()) say(str("full logs in ", *options.log_dir()));
      say(str("exit ", result.exit_code, ": ", result.summary()));
      return result.exit_code;
    }
    say(str("restarting the local group (restart ", failures, " of ", options.max_restarts(), ")"));
    round_env = after_round(env, result.summary());
  }
  say("the job finished while this node waited for a round");
  return 0;
}

}  // namespace dpt::launch
