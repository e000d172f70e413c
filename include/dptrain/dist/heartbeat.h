#pragma once
// Failure detection in seconds, whatever the collective timeout: a rank that is stopped (SIGSTOP,
// a debugger), killed without its launcher noticing, or whose machine is gone, is named by a live
// rank within a few step times, instead of every collective waiting for --dist-timeout (half an
// hour by default) first.
//
//   dpt::dist::Heartbeat heartbeat(comm->store(), comm->rank(), comm->size());
//   ...each step: heartbeat.step_took(seconds);   // the bound follows the step time
//
// Each rank's heartbeat thread counts up a key of its own in the rendezvous store and reads the
// count of the next rank around the ring (rank r watches r + 1 mod N): every rank is watched by
// one other, and each reads one key a beat, whatever the world size. The beats come from a thread,
// not from the training loop: a rank that validates, writes a checkpoint or waits in a long
// collective still beats. A rank alive but stuck in its own code keeps beating; the collective
// timeout stays the bound for that.
//
// The bound is `step_times` expected step times plus `slack`: a peer silent that long is named
// within it. A peer whose count has not moved for the bound less three beats (a beat is an eighth
// of the bound, at least 50 ms, at most 1 s) and less `confirm` is suspected (a line says so);
// still silent `confirm` later, while the store went on answering this rank, it is lost. A store
// that does not answer this rank for as long is lost too (for env:// and tcp:// rank 0 serves it).
// A rank that was itself stopped does not blame the others for the time it was away. A rank whose
// Heartbeat ends in order (the end of training, an error that unwinds) says so in the store, and
// its watcher stops watching it.
//
// On a loss, `report` gets a sentence naming the rank or the store, and `on_lost` runs on the
// heartbeat's thread: by default the process exits with status 1, since its collectives could only
// wait for the timeout; the launcher then restarts the group (--max-restarts, --resume auto) or the
// elastic rendezvous re-forms it. With `tell_every_rank` (--on-failure continue), the loss is also
// written to the store, where every rank's heartbeat reads it within a beat and runs its own
// `on_lost`: each rank leaves its collectives at once (abandonment.h), not only the lost rank's
// watcher. A rank's own code that finds the group broken (a collective failed) tells the others
// the same way, through raise().

#include <chrono>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <thread>

#include <torch/arg.h>

#include "dptrain/compat/compat.h"

namespace dpt::dist {

// What a heartbeat tells `on_lost`.
struct HeartbeatLoss {
  std::string message;      // the sentence `report` got
  std::optional<int> rank;  // the silent rank; unset when the store was lost, or a rank's code raised it
  bool store_lost = false;  // the store stopped answering this rank: nothing more goes through it
};

struct HeartbeatOptions {
  // The bound: a peer silent this long is named within it. Unset: `step_times` expected step times
  // plus `slack`, where the expected step time is the longest of the last few that step_took()
  // was given, or `first_step_time` before any.
  TORCH_ARG(std::optional<std::chrono::milliseconds>, silence) = std::nullopt;
  TORCH_ARG(int, step_times) = 3;
  TORCH_ARG(std::chrono::milliseconds, slack) = std::chrono::seconds(2);
  TORCH_ARG(std::chrono::milliseconds, first_step_time) = std::chrono::seconds(1);
  // The end of the silence allowed, in which a suspect must stay silent while the store answers;
  // `slack` and `silence` must be at least twice as long.
  TORCH_ARG(std::chrono::milliseconds, confirm) = std::chrono::seconds(1);
  // Where the suspicions and the loss are told; unset: stderr.
  TORCH_ARG(std::function<void(const std::string&)>, report);
  // Runs once, on the heartbeat's thread, after a loss was reported; unset: exit with status 1.
  TORCH_ARG(std::function<void(const HeartbeatLoss&)>, on_lost);
  // A loss named here, or raised, reaches every rank's on_lost through the store (one more key
  // read per beat). Unset: only the rank that watched the lost one hears of it.
  TORCH_ARG(bool, tell_every_rank) = false;
};

class Heartbeat {
 public:
  // Starts beating for `rank` of `world_size` and watching the next rank, through the job's
  // rendezvous store (a connection of its own where the store is a TCPStore, so that another
  // thread's long wait on the store never holds a beat back). Nothing to do for a world of one.
  Heartbeat(const compat::StorePtr& store, int rank, int world_size, HeartbeatOptions options = {});
  // Marks this rank as gone in order, then stops; waits at most a second for a store that hangs.
  ~Heartbeat();
  Heartbeat(const Heartbeat&) = delete;
  Heartbeat& operator=(const Heartbeat&) = delete;

  // One step's duration, from the training loop.
  void step_took(std::chrono::duration<double> step);
  // The bound now: a rank silent this long is named within it.
  std::chrono::milliseconds silence() const;
  // This rank's own code found the group broken (`why`: a collective failed): with
  // tell_every_rank, every other rank's on_lost hears of it within a beat. The first loss told
  // wins; later ones are dropped.
  void raise(const std::string& why);

  // The state the threads share (heartbeat.cpp); held by them too, since a thread blocked on a
  // store that stopped answering is left behind rather than waited for.
  struct Shared;

 private:
  std::shared_ptr<Shared> shared_;
  std::thread watcher_;  // judges; the beat thread, which may block on the store, is detached
};

}  // namespace dpt::dist
