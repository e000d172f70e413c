#include "dptrain/train/checkpoint/powersgd_state.h"

#include <algorithm>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>

#include "dptrain/common/error.h"
#include "dptrain/common/text.h"
#include "dptrain/compat/pickle.h"

namespace dpt::train {

namespace {
bool is_error_key(const std::string& key) { return starts_with(key, "error."); }
constexpr uint64_t kMaxRanks = 1'000'000;  // a saved rank past it is no gather's
}  // namespace

c10::impl::GenericDict gather_powersgd_state(const PowerSGDState& state, dist::Communicator& comm) {
  // Every rank holds the same keys in the same order (the same buckets reached the hook), so the
  // all_gathers pair up.
  const c10::impl::GenericDict own = state.state_dict();
  auto gathered = compat::string_dict();
  for (const auto& entry : own) {
    const std::string key = entry.key().toStringRef();
    if (!is_error_key(key)) {
      gathered.insert(key, entry.value());
      continue;
    }
    const std::vector<at::Tensor> errors = comm.all_gather(entry.value().toTensor().to(comm.device()));
    for (size_t r = 0; r < errors.size(); ++r) gathered.insert(key + "." + std::to_string(r), errors[r].cpu());
  }
  return comm.rank() == 0 ? gathered : compat::string_dict();
}

bool load_powersgd_state(PowerSGDState& state, const c10::impl::GenericDict& gathered, int rank, int world) {
  auto own = compat::string_dict();
  int saved_world = 0;  // 0: no errors saved (compression had not begun)
  for (const auto& entry : gathered) {
    const std::string key = entry.key().toStringRef();
    if (!is_error_key(key)) {
      own.insert(key, entry.value());
      continue;
    }
    const size_t dot = key.rfind('.');  // "error.<bucket>.<rank>"
    const std::optional<uint64_t> rank_number = decimal_number(std::string_view(key).substr(dot + 1));
    DPT_CHECK(dot > 6 && rank_number && *rank_number < kMaxRanks, CheckpointError,
              "the checkpoint's PowerSGD state holds '", key, "', not 'error.<bucket>.<rank>'");
    const int saved_rank = static_cast<int>(*rank_number);
    saved_world = std::max(saved_world, saved_rank + 1);
    if (saved_rank == rank) own.insert(key.substr(0, dot), entry.value());
  }
  state.load_state_dict(own);
  if (saved_world == 0 || saved_world == world) return true;
  state.drop_error_feedback();
  return false;
}

}  // namespace dpt::train
