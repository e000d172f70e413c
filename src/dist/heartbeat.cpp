#include "dptrain/dist/heartbeat.h"

#include <fmt/format.h>
#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <condition_variable>
#include <cstdio>
#include <cstdlib>
#include <deque>
#include <iostream>
#include <mutex>
#include <thread>
#include <vector>

#include <torch/csrc/distributed/c10d/TCPStore.hpp>

#include "dptrain/common/error.h"
#include "dptrain/common/host_name.h"
#include "dptrain/compat/tcp_store.h"
#include "dptrain/dist/store_text.h"

namespace dpt::dist {

namespace {

using Clock = std::chrono::steady_clock;
using std::chrono::milliseconds;

// Added to a rank's count when its Heartbeat ends in order: far above any count of beats.
constexpr int64_t kLeftInOrder = int64_t{1} << 40;
// The expected step time is the longest of this many recent steps.
constexpr size_t kStepWindow = 10;

std::string count_key(int rank) { return str("dptrain/heartbeat/", rank); }
std::string who_key(int rank) { return str("dptrain/heartbeat/", rank, "/who"); }
// The loss told to every rank (tell_every_rank): "<rank or -1> <sentence>", the first one told.
const char* const kAlarmKey = "dptrain/heartbeat/alarm";

std::vector<uint8_t> to_bytes(const std::string& text) { return {text.begin(), text.end()}; }
std::string to_text(const std::vector<uint8_t>& bytes) { return {bytes.begin(), bytes.end()}; }

std::string encode_loss(const HeartbeatLoss& loss) { return str(loss.rank.value_or(-1), " ", loss.message); }
HeartbeatLoss decode_loss(const std::string& text) {
  HeartbeatLoss loss;
  const size_t space = text.find(' ');
  const int rank = std::atoi(text.substr(0, space).c_str());
  if (rank >= 0) loss.rank = rank;
  loss.message = space == std::string::npos ? text : text.substr(space + 1);
  return loss;
}

// Writes `loss` as the alarm unless one was written first; returns the one that stays.
HeartbeatLoss write_alarm(c10d::Store& store, const HeartbeatLoss& loss) {
  return decode_loss(to_text(store.compareSet(kAlarmKey, {}, to_bytes(encode_loss(loss)))));
}

double seconds(Clock::duration d) { return std::chrono::duration<double>(d).count(); }
std::string fmt_seconds(double s) { return fmt::format("{:.2f}", s); }

std::string store_name(const compat::StorePtr& store) {
  const auto* tcp = dynamic_cast<const c10d::TCPStore*>(store.get());
  return tcp ? str("the rendezvous store at ", tcp->getHost(), ":", tcp->getPort()) : "the rendezvous store";
}

// A client of its own to a TCPStore's server: TCPStore runs one operation at a time per
// connection, so a wait on the communicator's connection (a group being formed) would hold the
// beats back. Other stores are shared.
compat::StorePtr own_connection(const compat::StorePtr& store) {
  const auto* tcp = dynamic_cast<const c10d::TCPStore*>(store.get());
  if (tcp == nullptr) return store;
  c10d::TCPStoreOptions options = compat::tcp_store_options();
  options.port = tcp->getPort();
  options.isServer = false;
  options.waitWorkers = false;
  options.timeout = std::chrono::seconds(30);
  return compat::make_tcp_store(tcp->getHost(), options);
}

}  // namespace

struct Heartbeat::Shared {
  Shared(HeartbeatOptions o, const compat::StorePtr& job_store, int r, int world)
      : options(std::move(o)),
        store(own_connection(job_store)),
        store_description(store_name(job_store)),
        rank(r),
        peer((r + 1) % world) {}

  const HeartbeatOptions options;
  const compat::StorePtr store;
  const std::string store_description;
  const int rank;
  const int peer;  // the rank this one watches

  std::mutex mutex;
  std::condition_variable wake;
  bool stopping = false;
  bool beats_ended = false;
  std::deque<double> steps;  // recent step times, seconds

  // The beat thread's exchanges with the store: since when the one in flight has waited, and when
  // the last answered. A store that fails at once (its process exited, so the
  // kernel closed the connection) is left to the launchers and the collectives, which notice that
  // as fast; one that does not answer at all (its process stopped, its machine gone) is this
  // watch's to report.
  std::optional<Clock::time_point> asking_since;
  Clock::time_point last_answer = Clock::now();
  // What it read of the peer: its count (0 until its first beat), when that was last seen to move,
  // and the silence that move ended.
  int64_t peer_count = 0;
  Clock::time_point peer_moved = Clock::now();
  Clock::duration last_gap{};
  bool peer_left = false;
  std::string peer_who;  // "host, pid N", read after its first beat
  // The watch's suspicion, while the peer stays silent.
  std::optional<Clock::time_point> suspected_at;
  // tell_every_rank: the loss this rank has to write (the beat thread writes it), and the one read
  // from the store, for the watch thread to tell on_lost.
  std::optional<HeartbeatLoss> outgoing;
  std::optional<HeartbeatLoss> incoming;

  // Seconds: the longest recent step, or the guess before the first.
  double expected_step() const {
    return steps.empty() ? seconds(options.first_step_time()) : *std::max_element(steps.begin(), steps.end());
  }
  milliseconds silence() const {
    if (options.silence()) return *options.silence();
    return milliseconds(std::llround(options.step_times() * expected_step() * 1000)) + options.slack();
  }
  milliseconds period() const { return std::clamp(silence() / 8, milliseconds(50), milliseconds(1000)); }
  // The silence seen that loses a peer: the bound less three beats, since the last beat is seen
  // up to a period after it was made, the silence is read up to a period after it reached this,
  // and judged up to a period after that. A rank silent for the whole bound is named within it;
  // one silent for less than five eighths of it never is.
  milliseconds loss_after() const { return silence() - 3 * period(); }

  std::string bound() const {
    if (options.silence()) return str("the bound: ", seconds(silence()), " s");
    return str("the bound: ", options.step_times(), " step times of ", fmt_seconds(expected_step()), " s + ",
               seconds(options.slack()), " s", steps.empty() ? ", before the first step was timed" : "");
  }
  std::string peer_name() const { return str("rank ", peer, peer_who.empty() ? "" : " (" + peer_who + ")"); }

  // The lines to tell and, when this rank must give up, the loss. Under the lock.
  struct Verdict {
    std::vector<std::string> lines;
    std::string loss;
    std::optional<int> lost_rank;  // with `loss`: the peer's, unset for the store
  };
  Verdict judge(Clock::time_point now) {
    Verdict v;
    const milliseconds allowed = loss_after();
    if (asking_since && now - *asking_since > allowed) {
      v.loss = str("rank ", rank, ": ", store_description, " has not answered this rank's heartbeat for ",
                   fmt_seconds(seconds(now - *asking_since)), " s (", bound(),
                   "). Rank 0 serves it for env:// and tcp://, so rank 0 is probably stopped or gone (killed, or "
                   "its machine lost)");
      return v;
    }
    if (peer_left) return v;
    // The silence as the reads saw it: from the last move seen to the last read. Between reads
    // nothing is known, so a watch that looks before the next read adds nothing.
    const Clock::duration quiet = std::max(Clock::duration::zero(), last_answer - peer_moved);
    if (quiet < allowed - options.confirm()) {
      if (suspected_at) {
        v.lines.push_back(str("rank ", rank, ": heartbeat: ", peer_name(), " beats again after ",
                              fmt_seconds(seconds(last_gap)), " s of silence"));
        suspected_at.reset();
      }
      return v;
    }
    if (!suspected_at) {
      suspected_at = now;
      v.lines.push_back(str("rank ", rank, ": heartbeat: ", peer_name(), " has been silent for ",
                            fmt_seconds(seconds(quiet)), " s; suspected, confirming for ",
                            seconds(options.confirm()), " s"));
      return v;
    }
    // Confirmed only by a store that answered after the suspicion, with the count still unmoved:
    // the silence is the peer's, not this rank's link to the store.
    if (quiet >= allowed && last_answer > *suspected_at) {
      v.lost_rank = peer;
      v.loss = str("rank ", rank, ": ", peer_name(), " sent no heartbeat for ", fmt_seconds(seconds(quiet)), " s (",
                   bound(), ") while ", store_description,
                   " kept answering: it is stopped (SIGSTOP, a debugger), killed without its launcher "
                   "noticing, or its machine is gone");
    }
    return v;
  }
};

namespace {

// The beat thread: counts up this rank's key and reads the peer's, once a period, until stopped;
// then marks this rank as gone in order.
void beat(const std::shared_ptr<Heartbeat::Shared>& s) {
  bool introduced = false;
  while (true) {
    bool stopping;
    bool watching;
    bool need_who;
    std::optional<HeartbeatLoss> outgoing;
    {
      std::lock_guard<std::mutex> lock(s->mutex);
      s->asking_since = Clock::now();
      stopping = s->stopping;
      watching = !s->peer_left;
      need_who = s->peer_who.empty() && s->peer_count > 0;
      outgoing = std::exchange(s->outgoing, std::nullopt);
    }
    try {
      if (stopping) {
        // A loss raised just before the end (a rank that leaves to re-form) still goes out.
        if (outgoing && s->options.tell_every_rank()) write_alarm(*s->store, *outgoing);
        s->store->add(count_key(s->rank), kLeftInOrder);
      } else {
        // Who this rank is, before its first beat: a watcher reads it once it sees one.
        if (!introduced) write_text(*s->store, who_key(s->rank), str(host_name(), ", pid ", getpid()));
        introduced = true;
        s->store->add(count_key(s->rank), 1);
        const int64_t count = watching ? s->store->add(count_key(s->peer), 0) : 0;
        const std::string who = need_who ? read_text(*s->store, who_key(s->peer)) : "";
        std::optional<HeartbeatLoss> alarm;
        if (s->options.tell_every_rank()) {
          // The first loss written stays: compareSet answers with it, whoever wrote it.
          if (outgoing) {
            alarm = write_alarm(*s->store, *outgoing);
          } else if (s->store->check({kAlarmKey})) {
            alarm = decode_loss(read_text(*s->store, kAlarmKey));
          }
        }
        std::lock_guard<std::mutex> lock(s->mutex);
        if (alarm && !s->incoming) {
          s->incoming = std::move(alarm);
          s->wake.notify_all();
        }
        const auto now = Clock::now();
        s->asking_since.reset();
        s->last_answer = now;
        if (!who.empty()) s->peer_who = who;
        if (watching && count != s->peer_count) {
          s->peer_count = count;
          s->last_gap = now - s->peer_moved;
          s->peer_moved = now;
          s->peer_left = count >= kLeftInOrder;
        }
      }
    } catch (const std::exception&) {
      std::lock_guard<std::mutex> lock(s->mutex);
      s->asking_since.reset();  // no answer to count: see asking_since
    }
    std::unique_lock<std::mutex> lock(s->mutex);
    if (stopping) {
      s->beats_ended = true;
      s->wake.notify_all();
      return;
    }
    // Until a period after this exchange, the period as it is then: step_took() wakes this thread
    // when the bound shrinks (the first steps are timed), so that it beats at the new rate at once.
    const auto exchanged = Clock::now();
    // A loss to tell every rank goes out at once.
    while (!s->stopping && !s->outgoing && Clock::now() < exchanged + s->period()) {
      s->wake.wait_until(lock, exchanged + s->period());
    }
  }
}

void exit_for_the_launcher(const std::string& report_line, const std::function<void(const std::string&)>& report) {
  report(report_line);
  std::cout.flush();
  std::cerr.flush();
  std::fflush(nullptr);
  std::_Exit(1);
}

// The watch thread: judges the beat thread's readings once a period, never touching the store.
void watch(const std::shared_ptr<Heartbeat::Shared>& s) {
  const auto report = s->options.report() ? s->options.report()
                                          : [](const std::string& line) { std::cerr << line << std::endl; };
  std::unique_lock<std::mutex> lock(s->mutex);
  auto last_wake = Clock::now();
  while (!s->stopping) {
    const milliseconds period = s->period();
    s->wake.wait_for(lock, period);  // (step_took() wakes it early when the bound shrinks)
    if (s->stopping) return;
    const auto now = Clock::now();
    // Woken far later than asked: this process itself was stopped (or starved), and the others'
    // silence is only its own absence. Every clock starts again.
    if (now - last_wake > period + s->silence() / 2) {
      if (s->asking_since) s->asking_since = now;
      s->last_answer = now;
      s->peer_moved = now;
      s->suspected_at.reset();
    }
    last_wake = now;
    // Another rank's loss, read from the store (tell_every_rank): this rank leaves as well.
    if (s->incoming) {
      const HeartbeatLoss told = *s->incoming;
      lock.unlock();
      report(str("rank ", s->rank, ": heartbeat: told through the store: ", told.message));
      if (s->options.on_lost()) s->options.on_lost()(told);
      return;
    }
    const Heartbeat::Shared::Verdict verdict = s->judge(now);
    HeartbeatLoss loss{verdict.loss, verdict.lost_rank, !verdict.loss.empty() && !verdict.lost_rank};
    // Told to every rank by the beat thread (a lost store carries nothing more).
    if (!verdict.loss.empty() && s->options.tell_every_rank() && !loss.store_lost) {
      s->outgoing = loss;
      s->wake.notify_all();
    }
    lock.unlock();
    for (const auto& line : verdict.lines) report(line);
    if (!verdict.loss.empty()) {
      report(verdict.loss);
      if (s->options.on_lost()) {
        s->options.on_lost()(loss);
      } else {
        exit_for_the_launcher(str("rank ", s->rank, ": exiting (status 1) so that the launcher restarts the group "
                                  "or the elastic rendezvous re-forms it, instead of waiting in a collective "
                                  "until the timeout"),
                              report);
      }
      return;
    }
    lock.lock();
  }
}

}  // namespace

Heartbeat::Heartbeat(const compat::StorePtr& store, int rank, int world_size, HeartbeatOptions options) {
  if (world_size < 2) return;
  DPT_CHECK(store, ConfigError, "rank ", rank, ": a heartbeat needs the job's rendezvous store");
  DPT_CHECK(options.step_times() >= 1 && options.slack() >= 2 * options.confirm() &&
                (!options.silence() || *options.silence() >= 2 * options.confirm()),
            ConfigError, "HeartbeatOptions: step_times must be at least 1, and slack and silence at least twice confirm");
  shared_ = std::make_shared<Shared>(std::move(options), store, rank, world_size);
  std::thread([s = shared_] { beat(s); }).detach();
  watcher_ = std::thread([s = shared_] { watch(s); });
}

Heartbeat::~Heartbeat() {
  if (!shared_) return;
  std::unique_lock<std::mutex> lock(shared_->mutex);
  shared_->stopping = true;
  shared_->wake.notify_all();
  lock.unlock();
  if (watcher_.joinable()) watcher_.join();
  // A beat thread blocked on a store that stopped answering is left behind, holding the state.
  lock.lock();
  shared_->wake.wait_for(lock, std::chrono::seconds(1), [&] { return shared_->beats_ended; });
}

void Heartbeat::step_took(std::chrono::duration<double> step) {
  if (!shared_) return;
  std::lock_guard<std::mutex> lock(shared_->mutex);
  const milliseconds period = shared_->period();
  shared_->steps.push_back(step.count());
  if (shared_->steps.size() > kStepWindow) shared_->steps.pop_front();
  if (shared_->period() < period) shared_->wake.notify_all();
}

void Heartbeat::raise(const std::string& why) {
  if (!shared_ || !shared_->options.tell_every_rank()) return;
  std::lock_guard<std::mutex> lock(shared_->mutex);
  if (shared_->outgoing || shared_->incoming) return;
  shared_->outgoing = HeartbeatLoss{why, std::nullopt, false};
  shared_->wake.notify_all();
}

std::chrono::milliseconds Heartbeat::silence() const {
  if (!shared_) return milliseconds(0);
  std::lock_guard<std::mutex> lock(shared_->mutex);
  return shared_->silence();
}

}  // namespace dpt::dist
