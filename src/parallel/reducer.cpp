#include "dptrain/parallel/reducer.h"

#include <algorithm>
#include <map>
#include <tuple>

#include <torch/csrc/autograd/engine.h>
#include <torch/csrc/autograd/function_hook.h>
#include <torch/csrc/autograd/grad_mode.h>
#include <torch/csrc/autograd/variable.h>

#include "dptrain/common/error.h"

namespace dpt {

namespace {
constexpr double kMiB = 1024.0 * 1024.0;
// A bucket past every parameter's bytes is just one bucket; the bound keeps the bytes an integer
// (inf or 1e300 MiB converted to int64 is undefined).
constexpr double kMaxBucketCapMb = 1024.0 * 1024.0;  // 1 TiB
bool is_bucket_cap(double mb) { return mb > 0 && mb <= kMaxBucketCapMb; }  // NaN is not
}  // namespace

BucketCaps bucket_caps(const ReducerOptions& options) {
  DPT_CHECK(is_bucket_cap(options.bucket_cap_mb()) && is_bucket_cap(options.first_bucket_cap_mb()) &&
                is_bucket_cap(options.last_bucket_cap_mb()),
            ConfigError, "bucket sizes must lie above 0 and at most ", kMaxBucketCapMb, " MiB, got bucket_cap_mb=",
            options.bucket_cap_mb(), ", first_bucket_cap_mb=", options.first_bucket_cap_mb(),
            " and last_bucket_cap_mb=", options.last_bucket_cap_mb());
  return BucketCaps{static_cast<int64_t>(options.first_bucket_cap_mb() * kMiB),
                    static_cast<int64_t>(options.bucket_cap_mb() * kMiB),
                    static_cast<int64_t>(options.last_bucket_cap_mb() * kMiB)};
}

std::vector<std::vector<size_t>> assign_buckets(const std::vector<at::Tensor>& params, const BucketCaps& caps) {
  // Parameters of one (dtype, device) share buckets, in registration order.
  using Key = std::tuple<int, int, int>;  // dtype, device type, device index
  std::map<Key, std::vector<size_t>> groups;
  for (size_t i = 0; i < params.size(); ++i) {
    const at::Tensor& p = params[i];
    groups[Key(static_cast<int>(p.scalar_type()), static_cast<int>(p.device().type()), p.device().index())]
        .push_back(i);
  }
  auto bytes_of = [&](size_t i) { return params[i].numel() * static_cast<int64_t>(params[i].element_size()); };

  std::vector<std::vector<size_t>> buckets;
  for (const auto& [key, indices] : groups) {
    size_t lo = 0, hi = indices.size();  // indices[lo, hi) are not in a bucket yet
    // A bucket from the top (the last registered parameters, whose gradients come first).
    auto from_top = [&](int64_t cap) {
      std::vector<size_t> bucket;
      for (int64_t bytes = 0; hi > lo && bytes < cap; bytes += bytes_of(bucket.back())) bucket.push_back(indices[--hi]);
      buckets.push_back(std::move(bucket));
    };
    // The first bucket: small, so that communication starts early in backward.
    from_top(caps.first);
    const size_t first = buckets.size() - 1;
    // The buckets at the end, from the bottom: the gradients of the first registered parameters
    // come last, and what their buckets hold is left to communicate once backward ends. The last
    // bucket reaches caps.last, each one before it twice as much, while that is below caps.rest.
    for (int64_t cap = caps.last; hi > lo && cap < caps.rest; cap *= 2) {
      std::vector<size_t> bucket;
      for (int64_t bytes = 0; hi > lo && bytes < cap; bytes += bytes_of(bucket.back())) bucket.push_back(indices[lo++]);
      std::reverse(bucket.begin(), bucket.end());
      buckets.push_back(std::move(bucket));
    }
    // The parameters in between, from the top, in buckets of caps.rest; a remainder smaller than
    // the first bucket's limit joins the first bucket rather than costing a collective of its own.
    int64_t between = 0;
    for (size_t i = lo; i < hi; ++i) between += bytes_of(indices[i]);
    if (between < caps.first) {
      while (hi > lo) buckets[first].push_back(indices[--hi]);
    }
    while (hi > lo) from_top(caps.rest);
  }
  buckets.erase(std::remove_if(buckets.begin(), buckets.end(), [](const auto& b) { return b.empty(); }),
                buckets.end());
  // Launch order: by when a bucket's first parameter is reached walking backwards.
  std::sort(buckets.begin(), buckets.end(),
            [](const std::vector<size_t>& a, const std::vector<size_t>& b) { return a.front() > b.front(); });
  return buckets;
}

// Runs after the parameter's AccumulateGrad node has added this backward's gradient to .grad.
class Reducer::ReadyHook : public torch::autograd::FunctionPostHook {
 public:
  ReadyHook(Reducer* reducer, size_t index) : reducer_(reducer), index_(index) {}
  torch::autograd::variable_list operator()(const torch::autograd::variable_list& outputs,
                                            const torch::autograd::variable_list& /*inputs*/) override {
    reducer_->mark_ready(index_);
    return outputs;
  }

 private:
  Reducer* reducer_;
  size_t index_;
};

namespace {

// A tensor shaped as `param`, sharing `buffer`'s memory from `offset`, without being an autograd
// view: optimizers call detach_() on gradients, which autograd refuses for views. A dense
// parameter lends its strides (channels_last stays channels_last): a gradient laid out as its
// parameter is accumulated in place without a transposing copy, and the optimizer updates both in
// one flat pass. Any other parameter gets a contiguous gradient.
at::Tensor alias_of(const at::Tensor& buffer, int64_t offset, const at::Tensor& param) {
  at::Tensor alias = at::empty({0}, buffer.options());
  if (param.is_non_overlapping_and_dense()) {
    alias.set_(buffer.storage(), offset, param.sizes(), param.strides());
  } else {
    alias.set_(buffer.storage(), offset, param.sizes());
  }
  return alias;
}

}  // namespace

Reducer::Reducer(std::vector<NamedParameter> params, std::shared_ptr<dist::Communicator> comm,
                 ReducerOptions options)
    : params_(std::move(params)), comm_(std::move(comm)), options_(options), hook_(comm_hooks::allreduce_mean()) {
  DPT_ASSERT(comm_, "a reducer needs a communicator");
  DPT_CHECK(options_.backward_passes() >= 1, ConfigError, "backward passes per reduction must be at least 1, got ",
            options_.backward_passes());
  DPT_CHECK(!options_.shard_gradients() || !options_.find_unused_parameters(), ConfigError, "rank ", comm_->rank(),
            ": sharded gradients (ZeRO-2) cannot find unused parameters: a shard has no unset gradient for the "
            "optimizer to skip");
  for (const auto& p : params_) {
    DPT_CHECK(p.tensor.requires_grad(), ConfigError, "rank ", comm_->rank(), ": parameter '", p.name,
              "' does not require gradients; pass only trainable parameters to the reducer");
    DPT_CHECK(!p.tensor.is_sparse() && p.tensor.layout() == at::kStrided, ConfigError, "rank ", comm_->rank(),
              ": parameter '", p.name, "' is not a dense tensor; only dense parameters can be reduced");
  }
  lay_out_buckets();
  for (size_t i = 0; i < params_.size(); ++i) {
    auto accumulator = torch::autograd::impl::grad_accumulator(params_[i].tensor);
    DPT_ASSERT(accumulator, "parameter '", params_[i].name, "' has no gradient accumulator");
    hook_keys_.push_back(accumulator->add_post_hook(std::make_unique<ReadyHook>(this, i)));
    accumulators_.push_back(std::move(accumulator));
  }
}

void Reducer::lay_out_buckets() {
  std::vector<at::Tensor> tensors;
  for (const auto& p : params_) tensors.push_back(p.tensor);
  bucket_indices_ = assign_buckets(tensors, bucket_caps(options_));

  torch::NoGradGuard no_grad;
  slots_.assign(params_.size(), Slot());
  buckets_.clear();
  buckets_.resize(bucket_indices_.size());
  const int world = comm_->size();
  for (size_t b = 0; b < bucket_indices_.size(); ++b) {
    Bucket& bucket = buckets_[b];
    bucket.params = bucket_indices_[b];
    for (size_t i : bucket.params) {
      slots_[i].bucket = b;
      slots_[i].offset = bucket.numel;
      bucket.numel += params_[i].tensor.numel();
    }
    const at::Tensor& first = params_[bucket.params.front()].tensor;
    const auto options = at::TensorOptions().dtype(first.scalar_type()).device(first.device());
    if (options_.shard_gradients()) {
      bucket.numel = (bucket.numel + world - 1) / world * world;
      bucket.shard = at::zeros({bucket.numel / world}, options);
    } else {
      bucket.buffer = at::zeros({bucket.numel}, options);
      bucket.handed = GradBucket{b, bucket_indices_.size(), bucket.buffer, {}, {}};
      for (size_t i : bucket.params) {
        slots_[i].grad = alias_of(bucket.buffer, slots_[i].offset, params_[i].tensor);
        bucket.handed.gradients.push_back(slots_[i].grad);
        bucket.handed.offsets.push_back(slots_[i].offset);
      }
    }
  }
}

void Reducer::rebucket(double bucket_cap_mb) {
  std::lock_guard<std::mutex> lock(mutex_);
  DPT_ASSERT(!armed_ && !options_.shard_gradients(), "buckets change between steps, and not under ZeRO-2");
  options_.bucket_cap_mb(bucket_cap_mb);
  // The parameters' .grad still alias the old buffers, which they keep alive: the next
  // prepare_for_backward() copies what they hold into the new ones.
  lay_out_buckets();
}

Reducer::~Reducer() {
  for (size_t i = 0; i < accumulators_.size(); ++i) accumulators_[i]->del_post_hook(hook_keys_[i]);
}

void Reducer::set_comm_hook(CommHook hook) {
  DPT_CHECK(hook, ConfigError, "rank ", comm_->rank(), ": the communication hook is empty");
  DPT_CHECK(!options_.shard_gradients(), ConfigError, "rank ", comm_->rank(),
            ": sharded gradients (ZeRO-2) are reduce-scattered; a communication hook cannot replace that");
  std::lock_guard<std::mutex> lock(mutex_);
  hook_ = std::move(hook);
}

void Reducer::allocate_bucket(size_t b) {
  Bucket& bucket = buckets_[b];
  const at::Tensor& first = params_[bucket.params.front()].tensor;
  bucket.buffer = at::empty({bucket.numel}, at::TensorOptions().dtype(first.scalar_type()).device(first.device()));
  int64_t end = 0;
  for (size_t i : bucket.params) {
    slots_[i].grad = alias_of(bucket.buffer, slots_[i].offset, params_[i].tensor);
    end = slots_[i].offset + params_[i].tensor.numel();
  }
  bucket.buffer.narrow(0, end, bucket.numel - end).zero_();  // the padding
}

// shard_gradients: a bucket whose reduce_scatter has completed gives its buffer back now rather
// than at the end of backward; and backward waits for the oldest reductions while more than
// kShardedBucketsInFlight are under way, so that the gradient memory stays a few buckets however
// far communication falls behind (it waits at the end of backward otherwise).
void Reducer::release_completed_buckets() {
  size_t in_flight = 0;
  for (size_t b = 0; b < next_launch_; ++b) {
    Bucket& bucket = buckets_[b];
    if (!bucket.buffer.defined()) continue;
    if (bucket.reduction.completed_at() != std::chrono::steady_clock::time_point{}) {
      bucket.reduction.wait();
    } else {
      ++in_flight;
    }
  }
  for (size_t b = 0; b < next_launch_ && in_flight > kShardedBucketsInFlight; ++b) {
    if (!buckets_[b].buffer.defined()) continue;
    buckets_[b].reduction.wait();
    --in_flight;
  }
}

void Reducer::adopt_gradient(size_t index) {
  at::Tensor& grad = params_[index].tensor.mutable_grad();
  if (options_.shard_gradients()) {
    // Into the bucket, which then holds the only copy: the parameter's own .grad goes.
    const size_t b = slots_[index].bucket;
    if (!buckets_[b].buffer.defined()) allocate_bucket(b);
    torch::NoGradGuard no_grad;
    if (grad.defined()) {
      slots_[index].grad.copy_(grad);
    } else {
      slots_[index].grad.zero_();
    }
    grad = at::Tensor();
    return;
  }
  const at::Tensor& slot = slots_[index].grad;
  if (grad.defined() && grad.is_same(slot)) return;
  torch::NoGradGuard no_grad;
  if (!grad.defined()) {
    slot.zero_();
  } else if (grad.data_ptr() != slot.data_ptr()) {
    slot.copy_(grad);
  }
  grad = slot;
}

void Reducer::rebind_gradients() {
  if (options_.shard_gradients()) return;  // gradients join their bucket when backward makes them
  for (size_t i = 0; i < params_.size(); ++i) adopt_gradient(i);
}

void Reducer::prepare_for_backward() {
  std::lock_guard<std::mutex> lock(mutex_);
  for (size_t i = 0; i < params_.size(); ++i) {
    slots_[i].grad_was_unset = !params_[i].tensor.grad().defined();
    slots_[i].ready = false;
    slots_[i].used = false;
  }
  rebind_gradients();
  armed_ = true;
  finish_queued_ = false;
  passes_done_ = 0;
  pass_end_queued_ = false;
  next_launch_ = 0;
  for (auto& bucket : buckets_) {
    bucket.pending = bucket.params.size();
    bucket.reduction = PendingReduction();
  }
}

bool Reducer::armed() const {
  std::lock_guard<std::mutex> lock(mutex_);
  return armed_;
}

void Reducer::disarm() {
  std::lock_guard<std::mutex> lock(mutex_);
  armed_ = false;
}

int Reducer::accumulated_passes() const {
  std::lock_guard<std::mutex> lock(mutex_);
  return passes_done_;
}

// Whether the current backward is one of the armed reducer's local passes. Passes are counted
// at the end of each backward (not per parameter), so a parameter unused in one pass does not
// shift the count.
bool Reducer::accumulating_locally() {
  if (passes_done_ + 1 >= options_.backward_passes()) return false;
  if (!pass_end_queued_) {
    pass_end_queued_ = true;
    torch::autograd::Engine::get_default_engine().queue_callback([this] {
      std::lock_guard<std::mutex> lock(mutex_);
      ++passes_done_;
      pass_end_queued_ = false;
    });
  }
  return true;
}

void Reducer::mark_ready(size_t index) {
  std::lock_guard<std::mutex> lock(mutex_);
  if (!armed_) return;  // local accumulation (no_sync, or no prepare_for_backward)
  if (accumulating_locally()) return;
  Slot& slot = slots_[index];
  DPT_CHECK(!slot.ready, ConfigError, "rank ", comm_->rank(), ": parameter '", params_[index].name,
            "' received a second gradient within one synchronized backward pass; run forward before "
            "each synchronized backward (use no_sync() for extra backward passes)");
  adopt_gradient(index);
  slot.ready = true;
  slot.used = true;
  if (!finish_queued_) {
    last_.began = std::chrono::steady_clock::now();  // this reducing backward's first gradient
    finish_queued_ = true;
    torch::autograd::Engine::get_default_engine().queue_callback([this] { finish_backward(); });
  }
  if (--buckets_[slot.bucket].pending == 0) launch_ready_buckets();
}

void Reducer::launch_ready_buckets() {
  while (next_launch_ < buckets_.size() && buckets_[next_launch_].pending == 0) {
    Bucket& bucket = buckets_[next_launch_];
    bucket.launched_at = std::chrono::steady_clock::now();
    const dist::CollectiveLabel label(str("bucket ", next_launch_));  // for the flight recorder
    if (options_.shard_gradients()) {
      const size_t b = next_launch_;
      bucket.reduction = PendingReduction(comm_->reduce_scatter_async(bucket.buffer, bucket.shard, dist::ReduceOp::Mean),
                                          [this, b] {
                                            buckets_[b].buffer = at::Tensor();
                                            for (size_t i : buckets_[b].params) slots_[i].grad = at::Tensor();
                                          });
      ++next_launch_;
      release_completed_buckets();
      continue;
    }
    // The bucket before starts its second stage, if its hook has one, before this one's first.
    if (next_launch_ > 0) buckets_[next_launch_ - 1].reduction.advance();
    bucket.reduction = hook_(*comm_, bucket.handed);
    ++next_launch_;
  }
}

ReductionTimes Reducer::last_reduction() const {
  std::lock_guard<std::mutex> lock(mutex_);
  ReductionTimes times = last_;
  for (const auto& bucket : buckets_) {
    const int64_t bytes = bucket.numel * static_cast<int64_t>(params_[bucket.params.front()].tensor.element_size());
    const int64_t reduced = bucket.reduction.reduced_bytes();
    times.buckets.push_back({bucket.launched_at, bucket.reduction.finished_at(), bytes, reduced < 0 ? bytes : reduced});
  }
  return times;
}

std::string Reducer::describe_unready() const {
  std::string names;
  for (size_t i = 0; i < params_.size(); ++i) {
    if (slots_[i].ready) continue;
    names += (names.empty() ? "" : ", ") + params_[i].name;
  }
  return names;
}

// How many ranks gave each parameter a gradient, as a pending sum over ranks. Launched after
// every bucket, so the collectives stay in the same order on all ranks.
PendingReduction Reducer::count_users() {
  at::Tensor users = at::zeros({static_cast<int64_t>(params_.size())}, at::kInt);
  auto* flags = users.data_ptr<int32_t>();
  for (size_t i = 0; i < params_.size(); ++i) flags[i] = slots_[i].used ? 1 : 0;
  users = users.to(comm_->device());
  const dist::CollectiveLabel label("unused-parameter counts");
  return PendingReduction(comm_->all_reduce_async(users, dist::ReduceOp::Sum),
                          [this, users] { unset_globally_unused(users.cpu()); });
}

void Reducer::unset_globally_unused(const at::Tensor& users) {
  const auto* counts = users.data_ptr<int32_t>();
  for (size_t i = 0; i < params_.size(); ++i) {
    if (counts[i] == 0 && slots_[i].grad_was_unset) params_[i].tensor.mutable_grad() = at::Tensor();
  }
}

void Reducer::finish_backward() {
  std::string unready;
  PendingReduction users;
  {
    std::lock_guard<std::mutex> lock(mutex_);
    // Parameters that got no gradient still take part, with what their .grad holds, so that
    // every rank launches every bucket and no peer is left waiting in a collective.
    if (!options_.find_unused_parameters()) unready = describe_unready();
    for (size_t i = 0; i < params_.size(); ++i) {
      if (slots_[i].ready) continue;
      adopt_gradient(i);
      slots_[i].ready = true;
      --buckets_[slots_[i].bucket].pending;
    }
    launch_ready_buckets();
    DPT_ASSERT(next_launch_ == buckets_.size(), "only ", next_launch_, " of ", buckets_.size(),
               " buckets were launched");
    if (!buckets_.empty()) buckets_.back().reduction.advance();
    if (options_.find_unused_parameters()) users = count_users();
    armed_ = false;
  }
  const auto wait_began = std::chrono::steady_clock::now();
  for (auto& bucket : buckets_) bucket.reduction.wait();
  users.wait();
  last_.wait_began = wait_began;
  last_.finished = std::chrono::steady_clock::now();
  DPT_CHECK(unready.empty(), ConfigError, "rank ", comm_->rank(), ": parameter(s) ", unready,
            " received no gradient in this backward pass, so their gradients cannot be reduced. Make every "
            "parameter take part in the loss, or enable find_unused_parameters when some "
            "parameters are legitimately unused in a step");
}

}  // namespace dpt
