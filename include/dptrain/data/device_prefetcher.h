#pragma once
// Copies the loader's next batch to the device while the current one is in use, as Apex's
// data_prefetcher does: the copy runs on a side stream, so it overlaps the forward and backward
// passes of the batch before it.
//
//   dpt::data::Loader loader(ds, sampler.indices(), epoch, LoaderOptions().batch_size(256).pin_memory(true));
//   dpt::data::DevicePrefetcher prefetcher(loader, DevicePrefetcherOptions(torch::Device(torch::kCUDA, local_rank)));
//   while (auto batch = prefetcher.next()) { train_step(batch->images, batch->labels); }  // already on the GPU
//
// Overlap needs page-locked host batches (LoaderOptions::pin_memory, CUDA builds): a copy from
// ordinary memory is staged by the driver and returns only when it is done. For the CPU device
// the prefetcher hands the loader's batches through untouched and costs nothing.
//
// Stream safety, the rules this class follows so that callers need not:
// - The consumer must not read a batch before its copy has finished: next() makes the stream that
//   is current on the device when it is called wait for the copy's event (no host blocking). Use
//   the batch on that stream, or make any other stream wait on it first.
// - The device tensors are allocated on the side stream. The caching allocator would hand their
//   memory back to that stream's next allocation (the next batch's copy) as soon as they are
//   freed, while kernels queued on the consumer stream may still read them: next() calls
//   record_stream(consumer stream) on them so their memory is reused only after that work ends.
// - The host buffers must not be refilled while a copy from them is in flight: the prefetcher
//   holds them until the copy's event has completed (the loader reuses a buffer only when nobody
//   else holds it), and its destructor waits for the side stream.

#include <c10/core/Event.h>
#include <c10/core/Stream.h>
#include <torch/arg.h>

#include <deque>
#include <exception>
#include <optional>
#include <vector>

#include "dptrain/data/loader.h"

namespace dpt::data {

struct DevicePrefetcherOptions {
  explicit DevicePrefetcherOptions(at::Device device) : device_(device) {}
  // Where the batches go. CPU: no copies, batches pass through.
  TORCH_ARG(at::Device, device);
};

class DevicePrefetcher {
 public:
  // `loader` must outlive the prefetcher. Starts the first copy at once. ConfigError when this
  // build of LibTorch has no support for the device type.
  DevicePrefetcher(Loader& loader, DevicePrefetcherOptions options);
  ~DevicePrefetcher();
  DevicePrefetcher(const DevicePrefetcher&) = delete;
  DevicePrefetcher& operator=(const DevicePrefetcher&) = delete;

  // The next batch with its images and labels on the device, ready for use on the current stream;
  // nullopt at the end of the epoch. Rethrows a loader error (or a failed copy) in place of the
  // batch it belongs to, like Loader::next; the batches after it follow on the next calls.
  std::optional<Batch> next();

  // Whether the next batch is already on the device, asked without waiting: true while a step
  // runs means loading and copying keep ahead of the GPU. False for the CPU device and at the end.
  bool next_ready() const { return next_ && next_->copied.query(); }

  // The samples skipped in the batches handed out so far, as Loader::skipped and skipped_count
  // say them, but without those of the batch being copied ahead: they belong to the next call.
  std::vector<SkippedSample> skipped() const;
  int64_t skipped_count() const { return loader_.skipped_count() - ahead_skipped_; }

 private:
  // A batch whose copy was queued on the side stream, with the host tensors it copies from.
  struct InFlight {
    Batch batch;
    at::Tensor host_images, host_labels;
    c10::Event copied;
  };
  void start_copy();
  // Lets go of host buffers whose copies have completed.
  void release_finished();

  Loader& loader_;
  DevicePrefetcherOptions options_;
  std::optional<c10::Stream> side_stream_;  // unset for the CPU device
  std::optional<InFlight> next_;
  std::exception_ptr error_;  // in place of next_: fetching or copying the next batch failed
  std::deque<InFlight> handed_out_;  // given to the consumer, host buffers possibly still being read
  int64_t ahead_skipped_ = 0;        // samples the loader skipped in next_'s batch (or error_'s)
};

}  // namespace dpt::data
