#include "dptrain/launch/supervise.h"

#include <iostream>

#include "dptrain/common/error.h"
#include "dptrain/common/exit_codes.h"
#include "dptrain/launch/worker_group.h"

namespace dpt::launch {

namespace {

void say(const std::string& line) { std::cerr << "dptrain launch: " << line << std::endl; }

}  // namespace

int supervise(JobMembership& membership, const std::vector<std::string>& program, const Environment& env) {
  int failures = 0;
  while (const auto round = membership.next_round()) {
    const LaunchOptions& options = round->options;
    std::cerr << describe_workers(options);
    WorkerGroup group(make_worker_specs(options, program, env, round->number),
                      SupervisorOptions()
                          .grace_period(options.grace_period())
                          .stop_when([&membership] { return membership.reformation_due(); }));
    const GroupResult result = group.run();
    if (result.succeeded()) {
      membership.succeeded();
      return 0;
    }
    if (result.outcome == GroupResult::Outcome::Stopped) {
      say(str("round ", round->number, " ends: a node failed or one waits to join; re-forming"));
      continue;
    }
    say(result.report());
    const bool interrupted = result.outcome == GroupResult::Outcome::Interrupted;
    membership.failed(interrupted);
    if (interrupted) return result.exit_code;
    if (result.exit_code == kExitStoppedOnRequest) {
      if (membership.stop_on_request_ends_job()) return result.exit_code;
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
  }
  say("the job finished while this node waited for a round");
  return 0;
}

}  // namespace dpt::launch
