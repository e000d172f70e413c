#include "agreement.h"

#include <algorithm>
#include <cstring>
#include <utility>
#include <vector>

#include "dptrain/common/error.h"

namespace dpt::dist::detail {

const char* const kDisagreementAdvice =
    "every rank must issue the same collectives, on tensors of the same shape and type, in the same order. A rank "
    "at another step skipped a collective or ran an extra one; another shape is a model or batch that differs.";

namespace {

// The step (8 bytes), then the identity without it: room for a label and a four-dimensional
// shape; a longer one is compared by its first bytes, which still hold the operation, the label
// and most of the shape.
constexpr int64_t kStepBytes = sizeof(int64_t);
constexpr int64_t kIdentityBytes = 192;

struct Identity {
  int64_t step = -1;
  std::string text;  // without the step
};

at::Tensor encode(const CollectiveRecord& record) {
  at::Tensor bytes = at::zeros({kIdentityBytes}, at::kByte);
  uint8_t* data = bytes.data_ptr<uint8_t>();
  std::memcpy(data, &record.step, kStepBytes);
  const std::string text = record.identity(/*with_step=*/false);
  std::copy_n(text.begin(), std::min<size_t>(text.size(), kIdentityBytes - kStepBytes - 1), data + kStepBytes);
  return bytes;
}

Identity decode(const at::Tensor& bytes) {
  const uint8_t* data = bytes.data_ptr<uint8_t>();
  Identity identity;
  std::memcpy(&identity.step, data, kStepBytes);
  identity.text = reinterpret_cast<const char*>(data + kStepBytes);
  return identity;
}

}  // namespace

bool can_check_agreement(const compat::Backend& backend) { return backend.getBackendName() == "gloo"; }

void check_agreement(compat::Backend& backend, const CollectiveRecord& record, std::chrono::milliseconds timeout,
                     const Abandonment* abandonment) {
  const int world_size = backend.getSize();
  if (world_size < 2) return;
  std::vector<at::Tensor> inputs{encode(record)};
  std::vector<std::vector<at::Tensor>> outputs(1);
  for (int r = 0; r < world_size; ++r) outputs[0].push_back(at::empty({kIdentityBytes}, at::kByte));
  c10d::AllgatherOptions options;
  options.timeout = timeout;
  const compat::WorkPtr work = backend.allgather(outputs, inputs, options);
  if (abandonment != nullptr) {
    abandonment->wait(work, timeout);
  } else {
    work->wait(timeout);
  }

  // A rank without a step (one that joined) agrees with any step.
  std::vector<Identity> identities;
  bool every_step_set = true;
  for (int r = 0; r < world_size; ++r) {
    identities.push_back(decode(outputs[0][r]));
    every_step_set = every_step_set && identities.back().step >= 0;
  }
  // Each identity once, with its ranks, in the order of its lowest rank.
  std::vector<std::pair<std::string, std::vector<int>>> ranks_by_identity;
  for (int r = 0; r < world_size; ++r) {
    const Identity& id = identities[static_cast<size_t>(r)];
    const std::string identity = every_step_set ? str(id.text, " step ", id.step) : id.text;
    auto same = std::find_if(ranks_by_identity.begin(), ranks_by_identity.end(),
                             [&](const auto& entry) { return entry.first == identity; });
    if (same == ranks_by_identity.end()) same = ranks_by_identity.insert(same, {identity, {}});
    same->second.push_back(r);
  }
  if (ranks_by_identity.size() == 1) return;
  std::string listing;
  for (const auto& [identity, ranks] : ranks_by_identity) {
    listing += str("\n    rank", ranks.size() > 1 ? "s " : " ");
    for (size_t i = 0; i < ranks.size(); ++i) listing += (i ? "," : "") + std::to_string(ranks[i]);
    listing += ": " + identity;
  }
  throw DistError(str("rank ", backend.getRank(), ": the ranks disagree on collective #", record.seq, " (",
                      record.operation, "): ", kDisagreementAdvice, " Each rank's:", listing));
}

}  // namespace dpt::dist::detail
