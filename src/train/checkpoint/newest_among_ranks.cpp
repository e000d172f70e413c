#include "dptrain/train/checkpoint/newest_among_ranks.h"

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cstring>
#include <vector>

#include "dptrain/common/atomic_file.h"
#include "dptrain/common/error.h"
#include "dptrain/common/read_file.h"
#include "dptrain/train/checkpoint/checkpoint_file.h"

namespace dpt::train {

namespace {

// Point-to-point tags of the copy: its size, then its bytes.
constexpr int kSizeTag = 71;
constexpr int kBytesTag = 72;

}  // namespace

FoundCheckpoint newest_among_ranks(dist::Communicator& comm, FoundCheckpoint found, const std::filesystem::path& dir) {
  if (comm.size() < 2) return found;
  const int64_t mine = found.checkpoint ? found.checkpoint->global_step : -1;
  std::vector<int64_t> steps;  // each rank's checkpoint's global step, -1 for none
  for (const at::Tensor& step : comm.all_gather(at::tensor({mine}, at::kLong).to(comm.device()))) {
    steps.push_back(step.cpu().item<int64_t>());
  }
  const auto newest_at = std::max_element(steps.begin(), steps.end());  // the lowest rank of the newest
  const int64_t newest = *newest_at;
  const int holder = static_cast<int>(newest_at - steps.begin());
  std::vector<int> behind;
  for (int r = 0; r < comm.size(); ++r) {
    if (steps[static_cast<size_t>(r)] < newest) behind.push_back(r);
  }
  if (behind.empty()) return found;
  if (comm.rank() == holder) {
    // Its file name travels as the receivers' own: checkpoint.pt, or checkpoint_epoch<N>.pt.
    const std::string name = found.file.filename().string();
    const auto bytes = read_file<std::vector<uint8_t>>(found.file.string());
    DPT_CHECK(bytes, CheckpointError, "rank ", comm.rank(), ": cannot read checkpoint ", found.file.string(),
              " again to send it to the ranks without it: ", std::strerror(errno));
    at::Tensor payload = at::empty({static_cast<int64_t>(bytes->size() + name.size() + 1)}, at::kByte);
    std::memcpy(payload.data_ptr<uint8_t>(), name.c_str(), name.size() + 1);
    std::memcpy(payload.data_ptr<uint8_t>() + name.size() + 1, bytes->data(), bytes->size());
    const at::Tensor size = at::tensor({payload.numel()}, at::kLong).to(comm.device());
    payload = payload.to(comm.device());
    for (int r : behind) {
      comm.send(size, r, kSizeTag);
      comm.send(payload, r, kBytesTag);
    }
    return found;
  }
  if (mine == newest) return found;
  at::Tensor size = at::zeros({1}, at::kLong).to(comm.device());
  comm.recv(size, holder, kSizeTag);
  const auto start = std::chrono::steady_clock::now();
  at::Tensor payload = at::empty({size.cpu().item<int64_t>()}, at::kByte).to(comm.device());
  comm.recv(payload, holder, kBytesTag);
  payload = payload.cpu();
  const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  const auto* data = payload.data_ptr<uint8_t>();
  const size_t received_bytes = static_cast<size_t>(payload.numel());
  const std::string file_name(reinterpret_cast<const char*>(data),
                              strnlen(reinterpret_cast<const char*>(data), received_bytes));
  const size_t offset = file_name.size() + 1;
  DPT_CHECK(!file_name.empty() && file_name.find('/') == std::string::npos && offset <= received_bytes,
            CheckpointError, "rank ", comm.rank(), ": the checkpoint rank ", holder, " sent has no file name");
  std::error_code error;
  std::filesystem::create_directories(dir, error);
  DPT_CHECK(!error, CheckpointError, "rank ", comm.rank(), ": cannot create ", dir.string(),
            " for the checkpoint of rank ", holder, ": ", error.message());
  const std::filesystem::path copy = dir / file_name;
  write_file_atomically(copy, [&](const ByteWriter& write) {
    write(reinterpret_cast<const char*>(data) + offset, received_bytes - offset);
  });
  FoundCheckpoint received;
  received.checkpoint = TrainingCheckpoint::from_ivalue(load_checkpoint(copy), copy);
  received.file = copy;
  received.passed_over = std::move(found.passed_over);
  received.received = FoundCheckpoint::Received{holder, static_cast<int64_t>(received_bytes - offset), seconds};
  return received;
}

}  // namespace dpt::train
