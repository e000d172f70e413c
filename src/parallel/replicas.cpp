#include "dptrain/parallel/replicas.h"

#include <map>

#include <torch/csrc/autograd/grad_mode.h>

#include "dptrain/common/error.h"
#include "dptrain/dist/all_gather_strings.h"

namespace dpt {

namespace {

// Strides only where they are not the contiguous ones: ranks whose parameters differ in memory
// format would lay their gradient buckets out differently and sum unrelated elements.
std::string describe(const std::string& kind, const std::string& name, const at::Tensor& t) {
  const std::string strides = t.is_contiguous() ? "" : str(", strides ", t.strides());
  return str(kind, " '", name, "' of shape ", t.sizes(), strides, " and dtype ", t.scalar_type());
}

std::string join_lines(const std::vector<std::string>& lines) {
  std::string joined;
  for (const auto& line : lines) joined += line + '\n';
  return joined;
}

std::vector<std::string> split_lines(const std::string& text) {
  std::vector<std::string> lines;
  size_t start = 0;
  for (size_t end; (end = text.find('\n', start)) != std::string::npos; start = end + 1) {
    lines.push_back(text.substr(start, end - start));
  }
  return lines;
}

}  // namespace

std::vector<std::string> describe_module(const torch::nn::Module& module) {
  std::vector<std::string> lines;
  for (const auto& p : module.named_parameters(/*recurse=*/true)) lines.push_back(describe("parameter", p.key(), p.value()));
  for (const auto& b : module.named_buffers(/*recurse=*/true)) lines.push_back(describe("buffer", b.key(), b.value()));
  return lines;
}

std::optional<Disagreement> compare_with_root(dist::Communicator& comm, const std::vector<std::string>& lines) {
  if (comm.size() == 1) return std::nullopt;
  const auto texts = dist::all_gather_strings(comm, join_lines(lines));
  const auto reference = split_lines(texts[0]);
  for (int r = 1; r < comm.size(); ++r) {
    if (texts[r] == texts[0]) continue;
    const auto other = split_lines(texts[r]);
    size_t i = 0;
    while (i < reference.size() && i < other.size() && reference[i] == other[i]) ++i;
    Disagreement d;
    d.rank = r;
    d.entry = i;
    d.on_root = i < reference.size() ? reference[i] : "nothing (no more entries)";
    d.on_rank = i < other.size() ? other[i] : "nothing (no more entries)";
    d.root_lines = reference.size();
    d.rank_lines = other.size();
    return d;
  }
  return std::nullopt;
}

void verify_replicas(dist::Communicator& comm, const std::vector<std::string>& description, const std::string& what) {
  const auto d = compare_with_root(comm, description);
  if (!d) return;
  throw ConfigError(str("rank ", comm.rank(), ": ", what, ": the model differs between rank 0 and rank ", d->rank,
                        " (", d->root_lines, " vs ", d->rank_lines, " parameters and buffers). First difference, "
                        "entry ", d->entry, ": rank 0 has ", d->on_root, ", rank ", d->rank, " has ", d->on_rank,
                        ". Build the same model on every rank"));
}

void broadcast_coalesced(dist::Communicator& comm, const std::vector<at::Tensor>& tensors, int root) {
  if (comm.size() == 1 || tensors.empty()) return;
  torch::NoGradGuard no_grad;
  std::map<at::ScalarType, std::vector<at::Tensor>> by_dtype;
  for (const auto& t : tensors) by_dtype[t.scalar_type()].push_back(t);
  for (auto& [dtype, group] : by_dtype) {
    std::vector<at::Tensor> flat;
    for (const auto& t : group) flat.push_back(t.reshape({-1}));
    at::Tensor packed = at::cat(flat);
    comm.broadcast(packed, root);
    int64_t offset = 0;
    for (auto& t : group) {
      t.copy_(packed.narrow(0, offset, t.numel()).view(t.sizes()));
      offset += t.numel();
    }
  }
}

}  // namespace dpt
