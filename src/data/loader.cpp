#include "dptrain/data/loader.h"

#include <algorithm>
#include <system_error>

#include "dptrain/common/error.h"
#include "dptrain/data/sampler.h"

namespace dpt::data {

Loader::Loader(std::shared_ptr<const Dataset> dataset, std::vector<int64_t> indices, int64_t epoch,
               LoaderOptions options)
    : dataset_(std::move(dataset)), options_(options) {
  DPT_CHECK(dataset_, ConfigError, "loader: no dataset");
  DPT_CHECK(options.batch_size() > 0, ConfigError, "loader: batch size must be positive, got ", options.batch_size());
  DPT_CHECK(options.threads() > 0 && options.threads() <= kMaxLoaderThreads, ConfigError,
            "loader: thread count must be from 1 to ", kMaxLoaderThreads, ", got ", options.threads());
  DPT_CHECK(options.prefetch_factor() > 0, ConfigError, "loader: prefetch must be at least one batch per thread, got ",
            options.prefetch_factor());
#if !defined(DPTRAIN_WITH_CUDA)
  DPT_CHECK(!options.pin_memory(), ConfigError,
            "loader: pin_memory needs a CUDA build of dptrain; this one is CPU-only");
#endif
  pool_ = options.buffer_pool() ? options.buffer_pool() : std::make_shared<BufferPool>();
  queue_epoch(std::move(indices), epoch);
  workers_.reserve(options.threads());
  try {
    for (int t = 0; t < options.threads(); ++t) workers_.emplace_back([this] { work(); });
  } catch (const std::system_error& e) {
    // The system refused a thread (its limit on threads or memory): the ones started must be
    // joined here, since no destructor runs for a constructor that throws, and a joinable
    // std::thread destroyed ends the program.
    stop();
    throw ConfigError(str("loader: the system refused worker thread ", workers_.size() + 1, " of ",
                          options.threads(), " (", e.what(), "); use fewer loader threads (-j/--workers)"));
  }
}

Loader::~Loader() { stop(); }

void Loader::stop() {
  {
    std::lock_guard<std::mutex> lock(mutex_);
    stopping_ = true;
  }
  space_.notify_all();
  for (auto& t : workers_) {
    if (t.joinable()) t.join();
  }
}

void Loader::queue_epoch(std::vector<int64_t> indices, int64_t epoch) {
  dataset_->will_read(epoch, indices);  // a remote set's next shards may come across the epoch's turn
  auto queued = std::make_shared<Epoch>();
  const int64_t n = static_cast<int64_t>(indices.size());
  const int64_t b = options_.batch_size();
  queued->indices = std::move(indices);
  queued->number = epoch;
  queued->batches = options_.drop_last() ? n / b : (n + b - 1) / b;
  {
    std::lock_guard<std::mutex> lock(mutex_);
    queued->first = epochs_.empty() ? 0 : epochs_.back()->end();
    epochs_.push_back(std::move(queued));
  }
  space_.notify_all();
}

std::shared_ptr<const Loader::Epoch> Loader::epoch_of(int64_t number) const {
  for (const auto& e : epochs_) {
    if (number < e->end()) return e;
  }
  return nullptr;
}

void Loader::work() {
  while (true) {
    int64_t number;
    std::shared_ptr<const Epoch> epoch;
    {
      std::unique_lock<std::mutex> lock(mutex_);
      space_.wait(lock, [&] {
        return stopping_ || (next_to_build_ < epochs_.back()->end() && next_to_build_ < next_to_return_ + ahead());
      });
      if (stopping_) return;
      number = next_to_build_++;
      epoch = epoch_of(number);
    }
    if (number == epoch->first) {
      dataset_->starts_reading(epoch->number);
      {
        std::lock_guard<std::mutex> lock(mutex_);
        said_start_of_ = epoch->first;
      }
      space_.notify_all();
    } else {
      // No sample of an epoch is read before its dataset was told that the epoch's reading
      // begins (a remote set then fetches in that epoch's order).
      std::unique_lock<std::mutex> lock(mutex_);
      space_.wait(lock, [&] { return stopping_ || said_start_of_ >= epoch->first; });
      if (stopping_) return;
    }
    Built built;
    try {
      built = build(*epoch, number - epoch->first);
    } catch (...) {
      built.error = std::current_exception();
    }
    {
      std::lock_guard<std::mutex> lock(mutex_);
      done_.emplace(number, std::move(built));
    }
    ready_.notify_all();
  }
}

at::Tensor BufferPool::acquire(const BufferSpec& spec, size_t capacity) {
  {
    std::lock_guard<std::mutex> lock(mutex_);
    for (const auto& buffer : buffers_) {
      // Only the pool still holds the tensor and its storage (no batch, no view of one): its last
      // user is done with it, and nobody can obtain it again but through the pool.
      const BufferSpec& held = buffer.spec;
      if (held.pinned == spec.pinned && held.dtype == spec.dtype && held.memory_format == spec.memory_format &&
          held.shape == spec.shape && buffer.tensor.use_count() == 1 && buffer.tensor.storage().use_count() == 1) {
        return buffer.tensor;
      }
    }
  }
  auto options = at::TensorOptions().dtype(spec.dtype);
#if defined(DPTRAIN_WITH_CUDA)
  if (spec.pinned) options = options.pinned_memory(true);
#endif
  at::Tensor tensor = at::empty(spec.shape, options, spec.memory_format);
  std::lock_guard<std::mutex> lock(mutex_);
  if (buffers_.size() < capacity) buffers_.push_back({tensor, spec});
  return tensor;
}

Loader::Built Loader::build(const Epoch& epoch, int64_t number) {
  const int64_t b = options_.batch_size();
  const int64_t first = number * b;
  const int64_t count = std::min<int64_t>(b, static_cast<int64_t>(epoch.indices.size()) - first);
  std::vector<int64_t> shape = dataset_->sample_shape();
  const int64_t numel = dataset_->sample_numel();
  shape.insert(shape.begin(), count);
  Built built;
  Batch& batch = built.batch;
  batch.number = number;
  // The samples are written as float CHW; a batch leaving in another type or layout is built in
  // a float buffer and converted into a second one, so both kinds of buffer are pooled.
  const bool converts = options_.dtype() != at::kFloat || options_.memory_format() != at::MemoryFormat::Contiguous;
  const size_t capacity = static_cast<size_t>(ahead() + options_.threads() + 2) * (converts ? 2 : 1);
  batch.images = pool_->acquire({shape, at::kFloat, at::MemoryFormat::Contiguous, options_.pin_memory() && !converts},
                                capacity);
  batch.labels = at::empty({count}, at::kLong);
  float* images = batch.images.data_ptr<float>();
  int64_t* labels = batch.labels.data_ptr<int64_t>();
  int64_t kept = 0;
  for (int64_t i = 0; i < count; ++i) {
    const auto [index, copy] = draw_sample(epoch.indices[first + i], dataset_->size());
    // A repeated copy's augmentation is keyed apart from the other copies' (and from every real
    // epoch's): the copy number goes above the epoch's bits.
    const int64_t augment_epoch = epoch.number + (copy << 32);
    try {
      // Kept samples pack to the front, so a skipped one leaves no hole.
      labels[kept] = dataset_->get(index, augment_epoch, images + kept * numel);
      batch.indices.push_back(index);
      ++kept;
    } catch (const DataError& e) {
      if (options_.bad_image_policy() != BadImagePolicy::Skip) throw;
      built.skipped.push_back({index, e.what()});
    }
  }
  if (kept < count) {
    batch.images = batch.images.narrow(0, 0, kept);
    batch.labels = batch.labels.narrow(0, 0, kept);
  }
  if (converts && kept > 0) {
    at::Tensor converted = pool_->acquire(
        {batch.images.sizes().vec(), options_.dtype(), options_.memory_format(), options_.pin_memory()}, capacity);
    converted.copy_(batch.images);
    batch.images = converted;
  }
  return built;
}

std::optional<Batch> Loader::next() {
  while (true) {
    Built built;
    {
      std::unique_lock<std::mutex> lock(mutex_);
      if (next_to_return_ >= epochs_.front()->end()) return std::nullopt;
      ready_.wait(lock, [&] { return done_.count(next_to_return_) > 0; });
      auto it = done_.find(next_to_return_);
      built = std::move(it->second);
      done_.erase(it);
      ++next_to_return_;
      skipped_.insert(skipped_.end(), built.skipped.begin(), built.skipped.end());
    }
    space_.notify_all();
    if (built.error) std::rethrow_exception(built.error);
    if (built.batch.indices.empty()) continue;
    return std::move(built.batch);
  }
}

bool Loader::next_epoch() {
  std::lock_guard<std::mutex> lock(mutex_);
  const Epoch& current = *epochs_.front();
  DPT_CHECK(next_to_return_ >= current.end(), ConfigError, "loader: next_epoch() while epoch ", current.number,
            " has ", current.end() - next_to_return_, " of its ", current.batches, " batches left");
  if (epochs_.size() == 1) return false;
  epochs_.pop_front();
  skipped_.clear();
  return true;
}

int64_t Loader::epoch() const {
  std::lock_guard<std::mutex> lock(mutex_);
  return epochs_.front()->number;
}

int64_t Loader::num_batches() const {
  std::lock_guard<std::mutex> lock(mutex_);
  return epochs_.front()->batches;
}

std::vector<SkippedSample> Loader::skipped() const {
  std::lock_guard<std::mutex> lock(mutex_);
  return skipped_;
}

int64_t Loader::skipped_count() const {
  std::lock_guard<std::mutex> lock(mutex_);
  return static_cast<int64_t>(skipped_.size());
}

}  // namespace dpt::data
