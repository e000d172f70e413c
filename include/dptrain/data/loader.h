#pragma once
// A threaded, prefetching loader. Worker threads each assemble whole batches (decode + transform
// every sample straight into one contiguous [B, C, H, W] tensor); batches come out in order, and
// batch k always holds the samples indices[k*B .. (k+1)*B) with the same augmentation, whatever the
// thread count or timing.
//
//   dpt::data::DistributedSampler sampler(ds->size(), SamplerOptions(world, rank).seed(seed));
//   sampler.set_epoch(epoch);
//   dpt::data::Loader loader(ds, sampler.indices(), epoch, LoaderOptions().batch_size(256).threads(8));
//   while (auto batch = loader.next()) { train_step(batch->images, batch->labels); }
//   for (auto& s : loader.skipped()) std::cerr << "skipped " << s.what << "\n";
//
// `indices` may hold a sampler's draws (SampleDraw: repeated copies of a sample, as i + k * size);
// each copy is augmented as if it were another epoch's, and batches report the dataset indices.
//
// Backpressure: at most prefetch_factor x threads batches are being built or waiting at any time,
// as torch.utils.data.DataLoader's workers keep prefetch_factor batches each. A worker's
// exception is rethrown by next() with its original type and text. The destructor stops the
// workers mid-epoch and joins them.
//
// The epoch after this one may be queued: the workers then go on to its batches as soon as this
// epoch's are all under way, within the same prefetch bound, so the first steps of the next epoch
// do not wait for a loader to start (a trainer's first step of each epoch ran at half speed):
//   loader.queue_epoch(next_sampler.indices(), epoch + 1);
//   while (auto batch = loader.next()) { ... }  // ends with this epoch
//   loader.next_epoch();                        // true: next() goes on with the queued epoch
//
// Batch buffers are reused once the consumer lets go of them. To reuse them across epochs too
// (one loader per epoch), pass the same pool to each:
//   auto pool = std::make_shared<dpt::data::BufferPool>();
//   for (...) { Loader loader(ds, indices, epoch, LoaderOptions().buffer_pool(pool)); ... }

#include <ATen/ATen.h>
#include <torch/arg.h>

#include <condition_variable>
#include <cstdint>
#include <deque>
#include <exception>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "dptrain/data/dataset.h"

namespace dpt::data {

// What a batch buffer is: its shape, element type, layout, and whether it is page-locked.
struct BufferSpec {
  std::vector<int64_t> shape;
  at::ScalarType dtype = at::kFloat;
  at::MemoryFormat memory_format = at::MemoryFormat::Contiguous;
  bool pinned = false;
};

// Batch buffers kept for reuse: a fresh 20 MB allocation costs more in page faults than decoding
// its images. Thread-safe; may be shared by loaders, also ones alive at the same time.
class BufferPool {
 public:
  // A tensor as `spec` says that nobody else holds: a pooled one, else a new one, kept for reuse
  // while the pool holds fewer than `capacity`.
  at::Tensor acquire(const BufferSpec& spec, size_t capacity);

 private:
  struct Buffer {
    at::Tensor tensor;
    BufferSpec spec;
  };
  std::mutex mutex_;
  std::vector<Buffer> buffers_;
};

// The most worker threads a loader starts: beyond every machine's cores, and far below the
// thread limits that would refuse some of them halfway.
inline constexpr int kMaxLoaderThreads = 1024;

struct LoaderOptions {
  // Samples per batch.
  TORCH_ARG(int64_t, batch_size) = 32;
  // Worker threads decoding and transforming, 1 to kMaxLoaderThreads.
  TORCH_ARG(int, threads) = 2;
  // Batches built ahead of the consumer per thread, at most (DataLoader's prefetch_factor). Per
  // thread, so that every thread has a batch to build while the consumer is busy: one count for
  // all threads would leave the threads beyond it idle.
  TORCH_ARG(int, prefetch_factor) = 2;
  // Leave out the last batch when it is smaller than batch_size.
  TORCH_ARG(bool, drop_last) = false;
  // Skip (and count) bad images, the training default, or stop with their DataError.
  TORCH_ARG(BadImagePolicy, bad_image_policy) = BadImagePolicy::Skip;
  // Allocate batches in page-locked memory for asynchronous copies to the GPU (CUDA builds only).
  TORCH_ARG(bool, pin_memory) = false;
  // Where batch buffers come from and return to; unset: a pool of the loader's own.
  TORCH_ARG(std::shared_ptr<BufferPool>, buffer_pool) = nullptr;
  // The images' element type and layout as batches leave the loader (bf16 and channels_last for
  // mixed precision): the worker that built a batch converts it, off the consumer's thread.
  TORCH_ARG(at::ScalarType, dtype) = at::kFloat;
  TORCH_ARG(at::MemoryFormat, memory_format) = at::MemoryFormat::Contiguous;
};

struct Batch {
  int64_t number = 0;            // position in the epoch, from 0
  at::Tensor images;             // [n, C, H, W], float32 unless LoaderOptions::dtype says otherwise
  at::Tensor labels;             // int64 [n]
  std::vector<int64_t> indices;  // dataset indices of the n samples
};

struct SkippedSample {
  int64_t index = 0;
  std::string what;  // the DataError's message, which names the file
};

class Loader {
 public:
  Loader(std::shared_ptr<const Dataset> dataset, std::vector<int64_t> indices, int64_t epoch, LoaderOptions options);
  ~Loader();
  Loader(const Loader&) = delete;
  Loader& operator=(const Loader&) = delete;

  // The next batch in order, or nullopt at the end of the epoch. Batches whose samples were all
  // skipped are passed over; others shrink by their skipped samples.
  std::optional<Batch> next();
  // Queues an epoch after the last one queued (or the first): its batches are built once all
  // those before them are under way.
  void queue_epoch(std::vector<int64_t> indices, int64_t epoch);
  // Once next() has ended the current epoch, moves on to the queued one: false if none is.
  // A ConfigError while the current epoch has batches left.
  bool next_epoch();
  // The current epoch's number and its batches.
  int64_t epoch() const;
  int64_t num_batches() const;
  // The current epoch's samples skipped so far under BadImagePolicy::Skip, in batch order, and
  // how many.
  std::vector<SkippedSample> skipped() const;
  int64_t skipped_count() const;

 private:
  // An epoch's samples in order. Batches are numbered across the loader's epochs, so that one
  // prefetch bound spans their boundaries.
  struct Epoch {
    std::vector<int64_t> indices;
    int64_t number = 0;  // the epoch, which keys the augmentation
    int64_t batches = 0;
    int64_t first = 0;  // the loader's batches before this epoch's first
    int64_t end() const { return first + batches; }
  };
  struct Built {
    Batch batch;
    std::vector<SkippedSample> skipped;
    std::exception_ptr error;
  };
  void work();
  Built build(const Epoch& epoch, int64_t number);
  void stop();
  // The epoch holding the loader's batch `number`; mutex_ held.
  std::shared_ptr<const Epoch> epoch_of(int64_t number) const;
  // Batches being built or waiting, at most.
  int64_t ahead() const { return static_cast<int64_t>(options_.prefetch_factor()) * options_.threads(); }

  std::shared_ptr<const Dataset> dataset_;
  LoaderOptions options_;

  mutable std::mutex mutex_;
  std::condition_variable ready_;  // a batch was finished
  std::condition_variable space_;  // the consumer took a batch, an epoch was queued or its start said, or stop
  std::deque<std::shared_ptr<const Epoch>> epochs_;  // the current one, then those queued
  std::map<int64_t, Built> done_;
  int64_t next_to_build_ = 0;
  int64_t next_to_return_ = 0;
  // The first batch of the latest epoch whose dataset was told that its reading begins.
  int64_t said_start_of_ = -1;
  bool stopping_ = false;
  std::vector<SkippedSample> skipped_;
  std::shared_ptr<BufferPool> pool_;
  std::vector<std::thread> workers_;
};

}  // namespace dpt::data
