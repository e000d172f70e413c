#include "dptrain/data/device_prefetcher.h"

#include <c10/core/StreamGuard.h>
#include <c10/core/impl/VirtualGuardImpl.h>

#include <utility>

#include "dptrain/common/error.h"

namespace dpt::data {

DevicePrefetcher::DevicePrefetcher(Loader& loader, DevicePrefetcherOptions options)
    : loader_(loader), options_(options) {
  const at::Device device = options_.device();
  if (device.is_cpu()) return;
  DPT_CHECK(c10::impl::hasDeviceGuardImpl(device.type()), ConfigError, "device prefetcher: this LibTorch has no ",
            device.str(), " support; prefetch to the CPU or use a LibTorch build with ", device.str());
  // The device-generic stream API (CUDA streams in CUDA builds) keeps this file free of CUDA headers.
  c10::impl::VirtualGuardImpl guard(device.type());
  const at::Device target = device.has_index() ? device : guard.getDevice();
  options_.device(target);
  side_stream_ = guard.getStreamFromGlobalPool(target);
  start_copy();
}

DevicePrefetcher::~DevicePrefetcher() {
  if (!side_stream_) return;
  // Queued copies still read the host buffers the loader will reuse or free. A destructor must not
  // throw; a device that cannot even synchronize a stream has failed beyond what waiting can fix.
  try {
    c10::impl::VirtualGuardImpl(side_stream_->device_type()).synchronizeStream(*side_stream_);
  } catch (const std::exception&) {
  }
}

void DevicePrefetcher::start_copy() {
  next_.reset();
  ahead_skipped_ = 0;
  const int64_t skipped_before = loader_.skipped_count();
  try {
    auto host = loader_.next();
    if (!host) return;  // the epoch's end: nothing ahead, so whatever the loader skipped counts now
    c10::StreamGuard on_side(*side_stream_);
    InFlight f{std::move(*host), {}, {}, c10::Event(options_.device().type())};
    f.host_images = f.batch.images;
    f.host_labels = f.batch.labels;
    f.batch.images = f.host_images.to(options_.device(), /*non_blocking=*/true);
    f.batch.labels = f.host_labels.to(options_.device(), /*non_blocking=*/true);
    f.copied.record(*side_stream_);
    next_.emplace(std::move(f));
  } catch (...) {
    error_ = std::current_exception();
  }
  ahead_skipped_ = loader_.skipped_count() - skipped_before;
}

std::vector<SkippedSample> DevicePrefetcher::skipped() const {
  std::vector<SkippedSample> handed_out = loader_.skipped();
  handed_out.resize(handed_out.size() - static_cast<size_t>(ahead_skipped_));  // in batch order: those ahead are last
  return handed_out;
}

void DevicePrefetcher::release_finished() {
  while (!handed_out_.empty() && handed_out_.front().copied.query()) handed_out_.pop_front();
}

std::optional<Batch> DevicePrefetcher::next() {
  if (!side_stream_) return loader_.next();
  if (error_) {
    const std::exception_ptr error = std::exchange(error_, nullptr);
    start_copy();
    std::rethrow_exception(error);
  }
  if (!next_) return std::nullopt;
  InFlight current = std::move(*next_);
  next_.reset();
  const c10::Stream consumer = c10::impl::VirtualGuardImpl(options_.device().type()).getStream(options_.device());
  current.copied.block(consumer);
  current.batch.images.record_stream(consumer);
  current.batch.labels.record_stream(consumer);
  Batch batch = current.batch;  // shares the device tensors; the host ones stay in `current`
  handed_out_.push_back(std::move(current));
  release_finished();
  start_copy();
  return batch;
}

}  // namespace dpt::data
