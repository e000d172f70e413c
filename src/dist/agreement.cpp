#include "agreement.h"

#include <algorithm>
#include <utility>
#include <vector>

#include "dptrain/common/error.h"

namespace dpt::dist::detail {

const char* const kDisagreementAdvice =
    "every rank must issue the same collectives, on tensors of the same shape and type, in the same order. A rank "
    "at another step skipped a collective or ran an extra one; another shape is a model or batch that differs.";

namespace {

// Room for an identity with a label and a four-dimensional shape; a longer one is compared by its
// first kIdentityBytes - 1 bytes, which still hold the operation, the label and most of the shape.
constexpr int64_t kIdentityBytes = 192;

at::Tensor encode(const std::string& identity) {
  at::Tensor bytes = at::zeros({kIdentityBytes}, at::kByte);
  const size_t length = std::min<size_t>(identity.size(), kIdentityBytes - 1);
  std::copy_n(identity.begin(), length, bytes.data_ptr<uint8_t>());
  return bytes;
}

std::string decode(const at::Tensor& bytes) {
  return std::string(reinterpret_cast<const char*>(bytes.data_ptr<uint8_t>()));
}

}  // namespace

void check_agreement(compat::Backend& backend, const CollectiveRecord& record, std::chrono::milliseconds timeout) {
  const int world_size = backend.getSize();
  if (world_size < 2) return;
  std::vector<at::Tensor> inputs{encode(record.identity())};
  std::vector<std::vector<at::Tensor>> outputs(1);
  for (int r = 0; r < world_size; ++r) outputs[0].push_back(at::empty({kIdentityBytes}, at::kByte));
  c10d::AllgatherOptions options;
  options.timeout = timeout;
  backend.allgather(outputs, inputs, options)->wait(timeout);

  // Each identity once, with its ranks, in the order of its lowest rank.
  std::vector<std::pair<std::string, std::vector<int>>> ranks_by_identity;
  for (int r = 0; r < world_size; ++r) {
    const std::string identity = decode(outputs[0][r]);
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
