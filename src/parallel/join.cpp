#include "dptrain/parallel/join.h"

#include "dptrain/common/error.h"

namespace dpt {

namespace {

dist::Communicator& shared_communicator(const std::vector<Joinable*>& joinables) {
  DPT_CHECK(!joinables.empty(), ConfigError, "a Join needs at least one joinable (a DistributedDataParallel)");
  dist::Communicator& comm = joinables.front()->join_communicator();
  for (const Joinable* j : joinables) {
    DPT_CHECK(j != nullptr, ConfigError, "a Join was given a null joinable");
    DPT_CHECK(&j->join_communicator() == &comm, ConfigError,
              "the joinables of one Join must share one communicator");
  }
  return comm;
}

}  // namespace

Join::Join(std::vector<Joinable*> joinables)
    : joinables_(std::move(joinables)), comm_(shared_communicator(joinables_)) {
  for (Joinable* j : joinables_) {
    DPT_CHECK(j->join_ == nullptr, ConfigError, "rank ", comm_.rank(), ": a joinable can take part in one Join at a time");
    j->join_ = this;
  }
}

Join::~Join() {
  for (Joinable* j : joinables_) j->join_ = nullptr;
}

int64_t Join::exchange(bool training) {
  const dist::CollectiveLabel label("join flags");
  at::Tensor flags = at::zeros({comm_.size()}, at::kInt);
  flags[comm_.rank()] = training ? 1 : 0;
  flags = flags.to(comm_.device());
  comm_.all_reduce(flags, dist::ReduceOp::Sum);
  const at::Tensor training_ranks = flags.cpu().nonzero();
  if (training_ranks.numel() > 0) authoritative_rank_ = static_cast<int>(training_ranks.max().item<int64_t>());
  return training_ranks.numel();
}

void Join::announce_step() {
  DPT_CHECK(!finished_, ConfigError, "rank ", comm_.rank(), ": a training step after Join::finish(); "
            "finish() ends the loop over this rank's data");
  exchange(/*training=*/true);
  ++steps_;
}

int64_t Join::finish() {
  DPT_CHECK(!finished_, ConfigError, "rank ", comm_.rank(), ": Join::finish() called twice");
  finished_ = true;
  // The others' steps go on, and this rank no longer knows them: its collectives carry no step, so
  // that the communicator's agreement check compares everything else.
  comm_.flight_recorder().set_step(-1);
  int64_t shadowed = 0;
  while (exchange(/*training=*/false) > 0) {
    for (Joinable* j : joinables_) j->shadow_step();
    ++shadowed;
  }
  // steps * world + rank: the maximum names the rank with the most steps, the highest on a tie.
  at::Tensor key = at::full({1}, static_cast<double>(steps_ * comm_.size() + comm_.rank()), at::kDouble);
  key = key.to(comm_.device());
  {
    const dist::CollectiveLabel label("join: the rank that trained longest");
    comm_.all_reduce(key, dist::ReduceOp::Max);
  }
  const int root = static_cast<int>(static_cast<int64_t>(key.item<double>()) % comm_.size());
  for (Joinable* j : joinables_) j->take_final_state(root);
  return shadowed;
}

}  // namespace dpt
