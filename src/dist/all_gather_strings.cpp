#include "dptrain/dist/all_gather_strings.h"

#include <algorithm>

namespace dpt::dist {

std::vector<std::string> all_gather_strings(Communicator& comm, const std::string& text) {
  const auto on = at::TensorOptions().device(comm.device());
  auto lengths = comm.all_gather(at::full({1}, static_cast<int64_t>(text.size()), on.dtype(at::kLong)));
  int64_t longest = 0;
  for (const auto& l : lengths) longest = std::max(longest, l.cpu().item<int64_t>());
  at::Tensor bytes = at::zeros({std::max<int64_t>(longest, 1)}, at::kByte);
  std::copy(text.begin(), text.end(), bytes.data_ptr<uint8_t>());
  auto gathered = comm.all_gather(bytes.to(comm.device()));
  std::vector<std::string> texts;
  for (size_t r = 0; r < gathered.size(); ++r) {
    at::Tensor host = gathered[r].cpu();
    texts.emplace_back(reinterpret_cast<const char*>(host.data_ptr<uint8_t>()), lengths[r].cpu().item<int64_t>());
  }
  return texts;
}

}  // namespace dpt::dist
