#include "dptrain/launch/node_rendezvous.h"

#include <algorithm>
#include <thread>

#include "dptrain/common/error.h"
#include "dptrain/common/host_name.h"
#include "dptrain/dist/store_text.h"

namespace dpt::launch {

namespace {

using Clock = std::chrono::steady_clock;

// Short enough that a round forms within a blink of its last node, long enough not to load the
// host's store: a handful of launchers poll it.
constexpr auto kPoll = std::chrono::milliseconds(100);
// How often a launcher whose workers train asks the store whether to re-form.
constexpr auto kReformationPoll = std::chrono::seconds(1);

double seconds(std::chrono::milliseconds span) { return static_cast<double>(span.count()) / 1000.0; }

const NodeRendezvousOptions& checked(const NodeRendezvousOptions& options, bool host) {
  DPT_CHECK(options.min_nodes() >= 1 && options.min_nodes() <= options.max_nodes(), ConfigError,
            "--nnodes MIN:MAX needs 1 <= MIN <= MAX, got ", options.min_nodes(), ":", options.max_nodes());
  DPT_ASSERT(!host || options.choose_worker_port(), "the host needs a way to choose the workers' port");
  return options;
}

// The host publishes the admission as it starts serving; a guest is admitted (or refused) before
// it takes part in anything.
dist::Admission admit(c10d::Store& store, bool host, const std::string& prefix, const NodeRendezvousOptions& options) {
  const auto admission =
      dist::AdmissionOptions(prefix, options.timeout()).token(options.job_token()).address(options.address());
  const std::string who = "the launcher on " + host_name();
  return host ? dist::Admission::open(store, who, admission) : dist::Admission::enter(store, who, admission);
}

}  // namespace

NodeRendezvous::NodeRendezvous(compat::StorePtr store, bool host, std::string run_id, NodeRendezvousOptions options)
    : store_(std::move(store)),
      host_(host),
      prefix_("dptrain/elastic/" + run_id + "/"),
      options_(checked(options, host)),
      admission_(admit(*store_, host_, prefix_, options_)) {}

void NodeRendezvous::report_refusals() {
  for (const std::string& line : admission_.take_refusals(*store_)) report(line);
}

std::string NodeRendezvous::key(const std::string& name) const { return prefix_ + name; }

std::string NodeRendezvous::round_key(int round, const std::string& name) const {
  return prefix_ + "round" + std::to_string(round) + "/" + name;
}

int64_t NodeRendezvous::read_int(const std::string& key) { return std::stoll(dist::read_text(*store_, key)); }

void NodeRendezvous::write_int(const std::string& key, int64_t value) {
  dist::write_text(*store_, key, std::to_string(value));
}

bool NodeRendezvous::exists(const std::string& key) { return store_->check({key}); }

void NodeRendezvous::report(const std::string& line) const {
  if (options_.report()) options_.report()(line);
}

std::optional<Membership> NodeRendezvous::next_round() {
  std::optional<Membership> joined = host_ ? std::optional<Membership>(host_round()) : guest_round();
  current_ = joined;
  next_poll_ = Clock::now() + kReformationPoll;
  return joined;
}

// The host opens round 0 itself and every later one as it closes the one before, so that a guest
// arriving while a round trains is already counted in the next one (and can ask for it).
Membership NodeRendezvous::host_round() {
  const int round = current_ ? current_->round + 1 : 0;
  const int previous_nodes = current_ ? current_->nnodes : options_.max_nodes();
  if (round == 0) write_int(key("open"), 0);
  write_int(round_key(round, "forming"), 1);
  const auto start = Clock::now();
  std::optional<Clock::time_point> last_call_ends;
  bool waited_out = false;  // closed by the end of the last call, not by the nodes joining
  int joined = 1;
  while (true) {
    report_refusals();
    joined = 1 + static_cast<int>(count(round_key(round, "guests")));
    if (joined >= options_.max_nodes()) break;
    if (joined >= options_.min_nodes()) {
      // Every guest of the last round is back (a re-formation to admit a node), or the wait for
      // the missing ones (lost, or slow to stop) is over.
      if (round > 0 && count(round_key(round, "returning")) >= previous_nodes - 1) break;
      if (!last_call_ends) {
        // Said, so that a host that waits (--rdzv-last-call, 10 s by default) says what for.
        last_call_ends = Clock::now() + options_.last_call();
        report(str("round ", round, ": ", joined, " node(s) of at most ", options_.max_nodes(),
                   " have joined; the last call for the others ends in ", seconds(options_.last_call()), " s"));
      }
      waited_out = Clock::now() >= *last_call_ends;
      if (waited_out) break;
    } else {
      DPT_CHECK(Clock::now() - start < options_.timeout(), TimeoutError, "elastic rendezvous, round ", round,
                ": only ", joined, " of at least ", options_.min_nodes(), " node(s) joined within ",
                seconds(options_.timeout()), " s. Start the missing nodes' launchers with the same --master-addr, "
                "--master-port and --rdzv-id, or lower MIN in --nnodes MIN:MAX");
    }
    std::this_thread::sleep_for(kPoll);
  }
  Membership membership;
  membership.round = round;
  membership.node_rank = 0;
  membership.nnodes = std::min(joined, options_.max_nodes());
  membership.master_port = options_.choose_worker_port()();
  write_int(round_key(round, "port"), membership.master_port);
  write_int(round_key(round, "nnodes"), membership.nnodes);
  write_int(key("open"), round + 1);
  write_int(round_key(round, "closed"), 1);
  const int waiting = joined - membership.nnodes;
  report(str("round ", round, " formed with ", membership.nnodes, " node(s)",
             waited_out ? " as the last call ended" : "",
             waiting > 0 ? str(" (", waiting, " more wait for the next round)") : ""));
  return membership;
}

std::optional<Membership> NodeRendezvous::guest_round() {
  const auto start = Clock::now();
  while (!exists(key("open"))) {
    DPT_CHECK(Clock::now() - start < options_.timeout(), TimeoutError, "elastic rendezvous: the host at --master-addr ",
              "serves the store but has opened no round within ", seconds(options_.timeout()), " s");
    std::this_thread::sleep_for(kPoll);
  }
  while (true) {
    const int round = static_cast<int>(read_int(key("open")));
    const int number = static_cast<int>(store_->add(round_key(round, "guests"), 1));
    // Tells the host that one of the last round's nodes is back, so it need not wait for it.
    if (current_ && current_->round + 1 == round) store_->add(round_key(round, "returning"), 1);
    bool told = false;
    std::optional<Clock::time_point> forming_since;
    // A guest waits without bound while an earlier round trains (a spare node may wait for hours),
    // and within options.timeout once the host forms this round.
    while (!exists(round_key(round, "closed"))) {
      if (exists(key("done"))) return std::nullopt;
      if (!forming_since && exists(round_key(round, "forming"))) forming_since = Clock::now();
      if (!forming_since && !told) {
        report(str("waiting for round ", round, ": it forms when the nodes training now re-form"));
        told = true;
      }
      DPT_CHECK(!forming_since || Clock::now() - *forming_since < options_.timeout() + options_.last_call(),
                TimeoutError, "elastic rendezvous, round ", round, ": the host did not close the round within ",
                seconds(options_.timeout() + options_.last_call()), " s");
      std::this_thread::sleep_for(kPoll);
    }
    const int nnodes = static_cast<int>(read_int(round_key(round, "nnodes")));
    if (number < nnodes) {
      return Membership{round, number, nnodes, static_cast<int>(read_int(round_key(round, "port")))};
    }
    report(str("round ", round, " is full (", nnodes, " node(s)); waiting for the next one"));
  }
}

bool NodeRendezvous::reformation_due() {
  DPT_ASSERT(current_.has_value(), "reformation_due() before next_round()");
  if (Clock::now() < next_poll_) return false;
  next_poll_ = Clock::now() + kReformationPoll;
  try {
    if (host_) report_refusals();
    if (count(round_key(current_->round, "reform")) > 0) return true;
    return current_->nnodes < options_.max_nodes() && count(round_key(current_->round + 1, "guests")) > 0;
  } catch (const std::exception&) {
    // The host is gone (or going, at the job's end): this round's workers find out for themselves,
    // and the next round's rendezvous reports it.
    return false;
  }
}

void NodeRendezvous::request_reformation() {
  DPT_ASSERT(current_.has_value(), "request_reformation() before next_round()");
  store_->add(round_key(current_->round, "reform"), 1);
}

void NodeRendezvous::finish() { write_int(key("done"), 1); }

}  // namespace dpt::launch
