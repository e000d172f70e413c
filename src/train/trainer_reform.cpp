// Going on without a lost rank (--on-failure continue; trainer_state.h). A loss is found by the
// heartbeat, which tells every rank through the store and ends their waits (dist/abandonment.h),
// or by a collective that fails at once (a peer's socket closed). Each rank then drops the step in
// flight: its collectives come before the optimizer's step, so the weights, the optimizer and the
// scaler are still the last completed step's, and only the step's forward moved anything (the
// batch-norm statistics, the generator), which is put back. The ranks left agree on who they are
// (dist/reformation.h), form a new group over the same store (dist::regroup), and rebuild the
// step's parts over it from that state, as a resume at another world size would from a checkpoint:
// the global batch kept through accumulation where it divides, the rest of the epoch re-dealt over
// the ranks left, so that every sample of the epoch is trained once. No process restarts and
// nothing is read from disk.
//
// Growing back: a replacement the launcher started asks to join (dist/joining.h); the ranks admit
// it after the step whose summed metrics carry the ask, form the grown group, and rank 0 sends it
// the last completed step's state, which it takes in place of a resume (admit_replacements,
// receive_state). Every part of the step is then rebuilt at the grown world size the same way.
#include "trainer_state.h"

#include <ATen/CPUGeneratorImpl.h>
#include <fmt/format.h>

#include <algorithm>
#include <cstring>
#include <string>
#include <vector>

#include "dptrain/common/error.h"
#include "dptrain/compat/pickle.h"
#include "dptrain/dist/init.h"
#include "dptrain/dist/reformation.h"
#include "dptrain/dist/rendezvous.h"
#include "dptrain/parallel/replicas.h"

namespace dpt::train {

namespace {

// The least time the ranks left wait for one another: a heartbeat's bound is never shorter.
constexpr std::chrono::milliseconds kLeastWindow{2000};

// FNV-1a over 8-byte words (then the tail's bytes): a digest that any change of a bit changes,
// fast enough for a model's state at each join.
uint64_t fnv1a(const std::vector<char>& bytes) {
  constexpr uint64_t kPrime = 1099511628211ULL;
  uint64_t hash = 14695981039346656037ULL;
  size_t i = 0;
  for (; i + 8 <= bytes.size(); i += 8) {
    uint64_t word = 0;
    std::memcpy(&word, bytes.data() + i, 8);
    hash = (hash ^ word) * kPrime;
  }
  for (; i < bytes.size(); ++i) hash = (hash ^ static_cast<uint8_t>(bytes[i])) * kPrime;
  return hash;
}

// The state that to_tensor's bytes hold, `whose` naming it in errors.
TrainingCheckpoint from_tensor(const at::Tensor& bytes, const std::string& whose) {
  const char* data = reinterpret_cast<const char*>(bytes.data_ptr<uint8_t>());
  return TrainingCheckpoint::from_ivalue(compat::pickle_load(std::vector<char>(data, data + bytes.numel())), whose);
}

// Pickled state as one byte tensor, for one broadcast or send.
at::Tensor to_tensor(const std::vector<char>& bytes) {
  at::Tensor tensor = at::empty({static_cast<int64_t>(bytes.size())}, at::kByte);
  std::copy(bytes.begin(), bytes.end(), reinterpret_cast<char*>(tensor.data_ptr<uint8_t>()));
  return tensor;
}

}  // namespace

void Trainer::State::prepare_to_continue() {
  if (!continues_on_failure()) return;
  const ParallelOptions& parallel = options.parallel();
  // Each refusal names what it lacks: the watch that finds a stopped rank, a group that Gloo can
  // leave (NCCL's waits are the GPU's), a style whose every part is rebuilt here.
  DPT_CHECK(parallel.heartbeat().has_value(), ConfigError, "--on-failure continue needs the heartbeat, which finds ",
            "a stopped rank: drop --heartbeat off");
  DPT_CHECK(parallel.mode() == ParallelMode::Ddp && parallel.zero_stage() == 0 && !parallel.sync_bn() &&
                parallel.comm_hook().kind() != CommHookKind::PowerSGD,
            ConfigError,
            "--on-failure continue works with --mode ddp, without --zero, --sync-bn or --comm-hook powersgd (their "
            "state and their layers hold the group); use --on-failure restart");
  DPT_CHECK(comm->backend_name() == "gloo", ConfigError, "--on-failure continue needs the Gloo backend (NCCL's ",
            "collectives cannot be left from the host yet): --dist-backend gloo, or --on-failure restart");
  comm->abandonment()->arm();
  if (replacement) return;  // join_as_replacement() took the job's store and members from its ticket
  joined_store = comm->store();
  for (int r = 0; r < comm->size(); ++r) joined_ranks.push_back(r);
}

dist::HeartbeatOptions Trainer::State::heartbeat_options() const {
  dist::HeartbeatOptions watch = *options.parallel().heartbeat();
  if (!continues_on_failure()) return watch;
  return watch.tell_every_rank(true).on_lost(
      [losses = losses, abandonment = comm->abandonment()](const dist::HeartbeatLoss& loss) {
        if (loss.rank) {
          std::lock_guard<std::mutex> lock(losses->mutex);
          losses->ranks.push_back(*loss.rank);
        }
        abandonment->abandon(loss.message);
      });
}

void Trainer::State::keep_step_start() {
  step_start_buffers.clear();
  for (const auto& buffer : model->buffers()) step_start_buffers.push_back(buffer.clone());
  step_start_rng = at::detail::getDefaultCPUGenerator().get_state();
}

void Trainer::State::forget_step_start() {
  torch::NoGradGuard no_grad;
  const auto buffers = model->buffers();
  DPT_CHECK(buffers.size() == step_start_buffers.size(), InternalError, "the model has ", buffers.size(),
            " buffers, ", step_start_buffers.size(), " were kept");
  for (size_t i = 0; i < buffers.size(); ++i) buffers[i].copy_(step_start_buffers[i]);
  at::Generator generator = at::detail::getDefaultCPUGenerator();  // shares the default's state
  generator.set_state(step_start_rng);
}

void Trainer::State::take_furthest_state(const dist::Survivors& left, TrainingCheckpoint& held, int rank_before) {
  const auto furthest = std::max_element(left.progress.begin(), left.progress.end());
  if (std::all_of(left.progress.begin(), left.progress.end(), [&](int64_t p) { return p == *furthest; })) return;
  const int holder = static_cast<int>(furthest - left.progress.begin());
  const bool holds = comm->rank() == holder;
  at::Tensor bytes = holds ? to_tensor(compat::pickle_save(held.to_ivalue())) : at::Tensor();
  at::Tensor size = at::full({1}, holds ? bytes.numel() : 0, at::kLong);
  comm->broadcast(size, holder);
  if (!holds) bytes = at::empty({size.item<int64_t>()}, at::kByte);
  comm->broadcast(bytes, holder);
  if (holds) return;
  held = from_tensor(bytes, "the state of rank " + std::to_string(holder));
  take_received_weights(held);
  if (options.log() != nullptr) {
    *options.log() << "rank " << rank_before << ": received the state of global step " << held.global_step
                   << " from rank " << left.ranks[static_cast<size_t>(holder)] << " (" << bytes.numel()
                   << " bytes), which completed a step this rank did not" << std::endl;
  }
}

void Trainer::State::rebuild_from(const TrainingCheckpoint& held, const MembershipReport& report,
                                  Clock::time_point began) {
  build_step();
  restore(held, "the state in memory");
  if (report.world_size > report.world_size_before) check_replicas_agree();
  style->start();
  if (stragglers) stragglers = std::make_unique<StragglerWatch>(options.stragglers(), comm->rank(), comm->size(), timeline.get());
  hosts.clear();
  train_step = std::make_unique<TrainStep>(StepParts{options, model, device, *style, *scaler, *mixing, ema.get(),
                                                     phase_hook(), timeline.get()});
  round_change = report;
  round_before_ended = began;
}

void Trainer::State::leave_group() {
  train_step.reset();
  heartbeat.reset();
  style.reset();  // the reducer's hooks leave the parameters
  train_loader.reset();
}

void Trainer::State::go_on_without_lost() {
  DPT_ASSERT(found_loss, "go_on_without_lost without a loss found");
  const FoundLoss found = *std::exchange(found_loss, std::nullopt);
  const std::string& failure = found.failure;
  const int rank_before = comm->rank();
  const int world_before = comm->size();
  if (options.log() != nullptr) {
    *options.log() << "rank " << rank_before << ": "
                   << (found.in_step ? str("dropping step ", global_step() + 1)
                                     : str("leaving the end of epoch ", epoch, " (to run it again)"))
                   << " and going on without the lost rank(s) (--on-failure continue): " << failure << std::endl;
  }
  if (found.in_step) forget_step_start();
  // The last completed step's state, still this group's (its world size and global batch).
  TrainingCheckpoint held = checkpoint_state();
  // The others may not have heard yet (a socket that closed reached this rank first).
  if (heartbeat) heartbeat->raise(str("rank ", rank_before, ": a collective failed: ", failure));
  // The ranks left hear of the loss within a beat, or at their next collective: one still computing
  // its step arrives up to a step time later. The heartbeat's bound (3 step times + 2 s) covers both.
  const auto window = std::max(heartbeat ? heartbeat->silence() : kLeastWindow, kLeastWindow);
  // Leave the old group: nothing of the step may hold it.
  leave_group();
  const std::shared_ptr<dist::Communicator> before = comm;
  dist::retire(before);
  std::vector<int> lost;
  {
    std::lock_guard<std::mutex> lock(losses->mutex);
    lost = std::exchange(losses->ranks, {});
  }
  ++reformations;
  const dist::Survivors left = dist::agree_on_survivors(*before->store(),
                                                        dist::ReformationOptions(reformations, rank_before, world_before)
                                                            .progress(global_step())
                                                            .lost(lost)
                                                            .window(window)
                                                            .gone([this](int r) {
                                                              return joined_store->check({dist::failed_worker_key(
                                                                  joined_ranks[static_cast<size_t>(r)])});
                                                            }));
  // Every rank still there: what failed was not a loss (a collective that differs between ranks,
  // say), and doing it again would fail again. The error stands, as without --on-failure continue.
  DPT_CHECK(left.size() < world_before, DistError, failure, " (every rank answered after it, so no rank was lost: ",
            "--on-failure continue does not go on)");
  comm = dist::regroup(*before, left.ranks, str("reformed", reformations), options.parallel().dist());
  std::vector<int> joined;
  for (int r : left.ranks) joined.push_back(joined_ranks[static_cast<size_t>(r)]);
  joined_ranks = std::move(joined);
  job = comm;
  // A rank behind the furthest had the furthest step in flight, and that step was trained (its
  // collectives completed elsewhere, so they had every rank's part): only a step past it is not.
  const int64_t furthest = *std::max_element(left.progress.begin(), left.progress.end());
  if (found.in_step && sample_log && left.progress[static_cast<size_t>(left.rank)] == furthest) {
    sample_log->drop(furthest + 1);
  }
  take_furthest_state(left, held, rank_before);
  // Rank 0 lost: the lowest rank left takes over its logs (appended to: on a shared --output
  // they continue rank 0's) and its checkpoints.
  if (comm->rank() == 0 && rank_before != 0) open_leader_logs();
  MembershipReport report;
  report.round = before->world().restart_count + reformations;
  report.cause = failure;
  report.world_size_before = world_before;
  report.world_size = comm->size();
  start_notes.clear();
  rebuild_from(held, report, found.at);
  if (options.log() != nullptr) {
    std::string ranks;
    for (int r : left.ranks) ranks += str(ranks.empty() ? "" : " ", r);
    *options.log() << fmt::format("rank {} goes on as rank {} of {} (ranks {} of the {} before) from global step {}",
                                  rank_before, comm->rank(), comm->size(), ranks, world_before, global_step());
    for (const auto& note : start_notes) *options.log() << "; " << note;
    *options.log() << std::endl;
  }
  start_notes.clear();
}

void Trainer::State::join_as_replacement() {
  dist::JoinedGroup joined = dist::join_running_group(options.parallel().dist());
  job = joined.comm;
  joined_store = std::move(joined.job_store);
  joined_ranks = joined.ticket.members;
  reformations = joined.ticket.generation;
  join_requests_seen = joined.ticket.requests;
}

void Trainer::State::admit_replacements() {
  const auto began = Clock::now();
  const int world_before = comm->size();
  const dist::JoinTicket ticket =
      dist::admit_replacements(*comm, *joined_store, joined_ranks, reformations + 1, join_requests_seen,
                               join_requests_asked, options.parallel().dist());
  join_requests_seen = join_requests_asked;
  const int joining = static_cast<int>(ticket.members.size()) - world_before;
  if (joining == 0) return;  // every ask was turned away
  ++reformations;
  std::string slots;
  for (size_t i = static_cast<size_t>(world_before); i < ticket.members.size(); ++i) {
    slots += str(slots.empty() ? "" : ", ", ticket.members[i]);
  }
  if (options.log() != nullptr) {
    *options.log() << "rank " << comm->rank() << ": admitting the replacement(s) of rank(s) " << slots
                   << " after global step " << global_step() << std::endl;
  }
  const TrainingCheckpoint held = checkpoint_state();
  leave_group();
  const std::shared_ptr<dist::Communicator> before = comm;
  comm = dist::grow(*before, joined_store, joining, dist::grown_group_name(reformations), options.parallel().dist());
  joined_ranks = ticket.members;
  job = comm;
  // Rank 0's state, which every rank holds alike, goes to the replacements alone: the others
  // wait for it at the rebuild's first collective.
  if (leader()) {
    const at::Tensor bytes = to_tensor(compat::pickle_save(held.to_ivalue()));
    const at::Tensor size = at::full({1}, bytes.numel(), at::kLong);
    for (int r = world_before; r < comm->size(); ++r) {
      comm->send(size, r);
      comm->send(bytes, r);
    }
  }
  MembershipReport report;
  report.round = comm->world().restart_count + reformations;
  report.cause = str("the replacement(s) of rank(s) ", slots, " joined");
  report.world_size_before = world_before;
  report.world_size = comm->size();
  start_notes.clear();
  rebuild_from(held, report, began);
  if (options.log() != nullptr) {
    *options.log() << fmt::format("rank {} goes on with the replacement(s) of rank(s) {} as {} ranks from global step {}",
                                  comm->rank(), slots, comm->size(), global_step());
    for (const auto& note : start_notes) *options.log() << "; " << note;
    *options.log() << std::endl;
  }
  start_notes.clear();
}

int64_t Trainer::State::join_requests() const {
  try {
    return dist::join_requests(*joined_store);
  } catch (const std::exception& e) {
    throw DistError(str("rank ", comm->rank(), ": cannot read the replacements' asks from the job's store (",
                        e.what(), "): the launcher that serves it is gone"));
  }
}

void Trainer::State::close_joining() const {
  try {
    dist::close_joining(*joined_store);
  } catch (const std::exception&) {
    // A store already gone has no replacement waiting on it.
  }
}

TrainingCheckpoint Trainer::State::receive_state() {
  at::Tensor size = at::empty({1}, at::kLong);
  comm->recv(size, 0);
  // Timed from here: the size comes once rank 0 has pickled the state, so this is the transfer.
  const auto began = Clock::now();
  at::Tensor bytes = at::empty({size.item<int64_t>()}, at::kByte);
  comm->recv(bytes, 0);
  const double seconds = seconds_since(began);
  TrainingCheckpoint held = from_tensor(bytes, "the state received from rank 0");
  if (options.log() != nullptr) {
    *options.log() << fmt::format("rank {} (the replacement of rank {}): received the state of global step {} from "
                                  "rank 0: {:.1f} MB in {:.2f} s ({:.3f} Gbit/s)",
                                  comm->rank(), file_rank(), held.global_step, bytes.numel() / 1e6, seconds,
                                  seconds > 0 ? bytes.numel() * 8 / seconds / 1e9 : 0.0)
                   << std::endl;
  }
  return held;
}

void Trainer::State::check_replicas_agree() {
  // The weights, the buffers and the optimizer's state, as a checkpoint holds them; not the
  // generator, which each rank keeps its own.
  const TrainingCheckpoint now = checkpoint_state();
  std::vector<c10::IValue> parts;
  for (const auto& entry : now.state_dict) parts.emplace_back(entry.value());
  parts.emplace_back(now.optimizer);
  const std::vector<char> bytes = compat::pickle_save(c10::ivalue::Tuple::create(std::move(parts)));
  const std::string digest = fmt::format("{:016x} ({} bytes)", fnv1a(bytes), bytes.size());
  const auto differs = compare_with_root(*comm, {digest});
  DPT_CHECK(!differs, InternalError, "after the join, rank ", differs ? differs->rank : 0, "'s weights and optimizer ",
            "state (digest ", differs ? differs->on_rank : "", ") differ from rank 0's (", differs ? differs->on_root : "",
            ")");
  if (options.log() != nullptr && (leader() || replacement)) {
    *options.log() << "rank " << comm->rank() << ": the " << comm->size()
                   << " replicas agree bitwise after the join (weights and optimizer state: digest " << digest << ")"
                   << std::endl;
  }
}

}  // namespace dpt::train
