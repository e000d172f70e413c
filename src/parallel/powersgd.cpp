#include "dptrain/parallel/powersgd.h"

#include <algorithm>
#include <optional>
#include <string_view>
#include <utility>
#include <vector>

#include <ATen/CPUGeneratorImpl.h>

#include "dptrain/common/error.h"
#include "dptrain/common/text.h"
#include "dptrain/compat/compat.h"

namespace dpt {

namespace {

constexpr uint64_t kSeedBound = 1'000'000'000;  // PyTorch's hook draws randint(1_000_000_000)
constexpr uint64_t kMaxBuckets = 1'000'000'000;  // a bucket index past it is no state_dict()'s

// Orthonormal columns in place, for a batch of matrices [b, n, r] (r <= n): PyTorch's choice,
// Gram-Schmidt for r <= 2 and for half precision (which QR does not take), else QR.
void orthogonalize(at::Tensor matrices, double epsilon) {
  const int64_t rank = matrices.size(2);
  const at::ScalarType dtype = matrices.scalar_type();
  if (rank > 2 && dtype != at::kHalf && dtype != at::kBFloat16) {
    at::Tensor r = at::empty({matrices.size(0), rank, rank}, matrices.options());
    at::linalg_qr_out(matrices, r, matrices);
    return;
  }
  for (int64_t i = 0; i < rank; ++i) {
    at::Tensor column = matrices.narrow(2, i, 1);
    // Without epsilon, a column of zeros becomes NaN (PyTorch's hook logs that and goes on).
    if (epsilon == 0) {
      column.div_(compat::norm_along(column, 1));
    } else {
      column.div_(compat::norm_along(column, 1) + epsilon);
    }
    if (i + 1 < rank) {
      at::Tensor rest = matrices.narrow(2, i + 1, rank - i - 1);
      rest.sub_(at::sum(column * rest, {1}, /*keepdim=*/true) * column);
    }
  }
}

// Where a bucket's gradients lie in its buffer, split as PyTorch's hook splits them: those to
// compress as [rows, cols] matrices, the rest reduced whole.
struct Split {
  struct Matrix {
    int64_t offset, rows, cols;
  };
  struct Whole {
    int64_t offset, numel;
  };
  std::vector<Matrix> matrices;
  std::vector<Whole> whole;
  int64_t p_numel = 0;
  int64_t q_numel = 0;
  int64_t whole_numel = 0;
  CompressionStats stats;
};

Split split(const GradBucket& bucket, const PowerSGDOptions& options) {
  Split out;
  for (size_t i = 0; i < bucket.gradients.size(); ++i) {
    const at::Tensor& gradient = bucket.gradients[i];
    const int64_t numel = gradient.numel();
    // The matrix in the gradient's memory order: for a channels_last weight, its columns
    // permuted, which a rank-r approximation maps to the same columns permuted.
    const int64_t rows = gradient.dim() > 0 ? gradient.size(0) : 1;
    const int64_t cols = rows > 0 ? numel / rows : 0;
    const int64_t rank = std::min<int64_t>({rows, cols, options.matrix_approximation_rank()});
    const int64_t compressed = (rows + cols) * rank;
    out.stats.before += numel;
    if (static_cast<double>(compressed) * options.min_compression_rate() < static_cast<double>(numel)) {
      out.matrices.push_back({bucket.offsets[i], rows, cols});
      out.p_numel += rows * rank;
      out.q_numel += cols * rank;
      out.stats.after += compressed;
    } else {
      out.whole.push_back({bucket.offsets[i], numel});
      out.whole_numel += numel;
      out.stats.after += numel;
    }
  }
  return out;
}

// A gradient reduced whole, in a bucket-sized tensor.
at::Tensor whole_of(const at::Tensor& flat, const Split::Whole& whole) {
  return flat.narrow(0, whole.offset, whole.numel);
}

// A gradient to compress: the matrix it is approximated from ([1, rows, cols]), where its
// approximation goes (the same place in the bucket's buffer), and its P ([1, rows, r]) and Q
// ([1, cols, r]) in the memory the collectives carry.
struct Compressed {
  at::Tensor matrix;
  at::Tensor approximation;
  at::Tensor p;
  at::Tensor q;
};

// The matrices grouped by shape, the shapes in order of first appearance (the order in which
// PyTorch's hook lays out P and Q and draws Q's random values), each with its P and Q.
std::vector<Compressed> lay_out(const Split& parts, const at::Tensor& source, const at::Tensor& buffer,
                                const at::Tensor& p_memory, const at::Tensor& q_memory, int rank_limit) {
  const auto same_shape = [](const Split::Matrix& a, const Split::Matrix& b) {
    return a.rows == b.rows && a.cols == b.cols;
  };
  std::vector<Split::Matrix> shapes;
  for (const Split::Matrix& m : parts.matrices) {
    const auto seen = [&](const Split::Matrix& s) { return same_shape(s, m); };
    if (std::none_of(shapes.begin(), shapes.end(), seen)) shapes.push_back(m);
  }
  std::vector<Compressed> out;
  int64_t p_at = 0, q_at = 0;
  for (const Split::Matrix& shape : shapes) {
    for (const Split::Matrix& m : parts.matrices) {
      if (!same_shape(m, shape)) continue;
      const int64_t rank = std::min<int64_t>({m.rows, m.cols, rank_limit});
      const auto matrix_in = [&m](const at::Tensor& flat) {
        return flat.narrow(0, m.offset, m.rows * m.cols).view({1, m.rows, m.cols});
      };
      out.push_back({matrix_in(source), matrix_in(buffer),
                     p_memory.narrow(0, p_at, m.rows * rank).view({1, m.rows, rank}),
                     q_memory.narrow(0, q_at, m.cols * rank).view({1, m.cols, rank})});
      p_at += m.rows * rank;
      q_at += m.cols * rank;
    }
  }
  return out;
}

}  // namespace

uint64_t PowerSGDState::SeedSequence::next() {
  // numpy's legacy bounded integers: the bound's bit mask over 32-bit draws, rejecting those above.
  constexpr uint32_t kMask = (1u << 30) - 1;
  static_assert(kMask >= kSeedBound - 1 && kMask / 2 < kSeedBound - 1, "the smallest mask covering the bound");
  for (;;) {
    const uint32_t value = static_cast<uint32_t>(engine_()) & kMask;
    ++draws_;
    if (value <= kSeedBound - 1) return value;
  }
}

void PowerSGDState::SeedSequence::restore(int64_t draws) {
  engine_.seed(seed_);
  engine_.discard(static_cast<unsigned long long>(draws));
  draws_ = draws;
}

PowerSGDState::PowerSGDState(PowerSGDOptions options) : options_(options), seeds_(options.random_seed()) {
  DPT_CHECK(options_.matrix_approximation_rank() >= 1, ConfigError,
            "PowerSGD's matrix approximation rank must be at least 1, got ", options_.matrix_approximation_rank());
  DPT_CHECK(options_.start_iter() >= 0, ConfigError, "PowerSGD's start iteration must be at least 0, got ",
            options_.start_iter());
  DPT_CHECK(options_.min_compression_rate() > 0, ConfigError,
            "PowerSGD's minimum compression rate must be above 0, got ", options_.min_compression_rate());
  DPT_CHECK(options_.orthogonalization_epsilon() >= 0, ConfigError,
            "PowerSGD's orthogonalization epsilon must be at least 0, got ", options_.orthogonalization_epsilon());
}

void PowerSGDState::end_bucket(const GradBucket& bucket, const CompressionStats& stats) {
  step_stats_.before += stats.before;
  step_stats_.after += stats.after;
  if (!bucket.is_last()) return;
  ++iteration_;
  last_stats_ = std::exchange(step_stats_, CompressionStats{});
}

c10::impl::GenericDict PowerSGDState::state_dict() const {
  c10::impl::GenericDict state(c10::StringType::get(), c10::AnyType::get());
  state.insert("iteration", iteration_);
  state.insert("seed_draws", seeds_.draws());
  for (const auto& [index, memory] : buckets_) {
    const std::string b = std::to_string(index);
    // Copies: the steps after go on writing both in place.
    const auto cpu = at::TensorOptions().device(at::kCPU);
    if (memory.error.defined()) state.insert("error." + b, memory.error.to(cpu, false, /*copy=*/true));
    if (memory.q.defined()) state.insert("q." + b, memory.q.to(cpu, false, /*copy=*/true));
  }
  return state;
}

void PowerSGDState::load_state_dict(const c10::impl::GenericDict& state) {
  const auto integer = [&state](const char* key) {
    const auto found = state.find(key);
    DPT_CHECK(found != state.end() && found->value().isInt(), ConfigError, "the PowerSGD state has no integer '",
              key, "': it is not one PowerSGDState::state_dict() wrote");
    return found->value().toInt();
  };
  const int64_t iteration = integer("iteration");
  const int64_t draws = integer("seed_draws");
  std::map<size_t, BucketMemory> buckets;
  for (const auto& entry : state) {
    const std::string key = entry.key().toStringRef();
    if (key == "iteration" || key == "seed_draws") continue;
    // "error.<bucket>" or "q.<bucket>"
    const size_t dot = key.find('.');
    const std::string what = key.substr(0, dot);
    const std::optional<uint64_t> index =
        dot == std::string::npos ? std::nullopt : decimal_number(std::string_view(key).substr(dot + 1));
    DPT_CHECK((what == "error" || what == "q") && index && *index < kMaxBuckets && entry.value().isTensor(),
              ConfigError, "the PowerSGD state holds '", key, "', not an error or a Q tensor of a bucket ",
              "('error.<bucket>', 'q.<bucket>'): it is not one PowerSGDState::state_dict() wrote");
    BucketMemory& memory = buckets[*index];
    (what == "error" ? memory.error : memory.q) = entry.value().toTensor();
  }
  // Placed on the bucket's device at the first use (the tensors are the bucket's dtype).
  iteration_ = iteration;
  seeds_.restore(draws);
  buckets_ = std::move(buckets);
}

namespace {

// One bucket's reduction under way, shared by its two stages.
struct BucketStep {
  dist::Communicator* comm = nullptr;
  GradBucket bucket;
  Split parts;
  std::vector<Compressed> compressed;
  std::vector<at::Tensor> whole_sent;  // each whole gradient's place in the first collective, after P
  dist::Work reduction;                // of P and the whole gradients, then of Q
};

}  // namespace

class PowerSGDHook {
 public:
  explicit PowerSGDHook(std::shared_ptr<PowerSGDState> state) : state_(std::move(state)) {}

  PendingReduction operator()(dist::Communicator& comm, const GradBucket& bucket) const {
    PowerSGDState& state = *state_;
    if (!state.compressing()) {
      state.end_bucket(bucket, {bucket.buffer.numel(), bucket.buffer.numel()});
      return PendingReduction(comm.all_reduce_async(bucket.buffer, dist::ReduceOp::Mean));
    }
    const PowerSGDOptions& options = state.options();
    const at::Tensor& input = bucket.buffer;
    PowerSGDState::BucketMemory& memory = state.buckets_[bucket.index];
    DPT_CHECK(!memory.error.defined() || memory.error.numel() == input.numel(), ConfigError, "rank ", comm.rank(),
              ": PowerSGD's saved error of bucket ", bucket.index, " holds ", memory.error.numel(),
              " values, the bucket ", input.numel(), ": the state comes from another model or bucket size");
    auto step = std::make_shared<BucketStep>();
    step->comm = &comm;
    step->bucket = bucket;

    // With error feedback the gradient is compressed from the error buffer: it takes this step's
    // input (the sum is PyTorch's input + error) and, once the result is in the bucket's buffer,
    // gives it up again (error = input - result). So the input needs no copy of its own, and the
    // buffer is kept from step to step: a bucket-sized allocation each step costs a page fault
    // per 4 KiB.
    at::Tensor source = input;
    if (options.use_error_feedback()) {
      if (memory.error.defined()) {
        memory.error = memory.error.to(input.device());
        memory.error.add_(input);
      } else {
        memory.error = input.clone();
      }
      source = memory.error;
    }

    step->parts = split(bucket, options);
    const Split& parts = step->parts;
    DPT_CHECK(!memory.q.defined() || memory.q.numel() == parts.q_numel, ConfigError, "rank ", comm.rank(),
              ": PowerSGD's saved Q of bucket ", bucket.index, " holds ", memory.q.numel(),
              " values, the bucket needs ", parts.q_numel, ": the state comes from another model, bucket size or rank");
    // P and the whole gradients travel in one collective (PyTorch reduces them one after the
    // other; the sums are the same). P is made anew each step: only Q carries over (warm start).
    if (!memory.first.defined() || memory.first.numel() != parts.p_numel + parts.whole_numel) {
      memory.first = at::empty({parts.p_numel + parts.whole_numel}, input.options());
    }
    int64_t at = parts.p_numel;
    for (const Split::Whole& whole : parts.whole) {
      step->whole_sent.push_back(memory.first.narrow(0, at, whole.numel));
      at += whole.numel;
    }
    const bool fresh = !options.warm_start() || !memory.q.defined();
    if (fresh) memory.q = at::empty({parts.q_numel}, input.options());
    memory.q = memory.q.to(input.device());
    step->compressed = lay_out(parts, source, input, memory.first.narrow(0, 0, parts.p_numel), memory.q,
                               options.matrix_approximation_rank());
    if (fresh) {
      // One seed per bucket, drawn in bucket order on every rank, so all ranks start alike; Q's
      // values from a generator of its own (PyTorch forks the CPU generator for them).
      at::Generator generator = at::make_generator<at::CPUGeneratorImpl>(state.seeds_.next());
      for (Compressed& c : step->compressed) {
        c.q.copy_(at::randn(c.q.sizes(), generator, at::TensorOptions().dtype(input.scalar_type())));
      }
    }
    for (Compressed& c : step->compressed) orthogonalize(c.q, options.orthogonalization_epsilon());
    for (Compressed& c : step->compressed) at::bmm_out(c.p, c.matrix, c.q);
    for (size_t i = 0; i < parts.whole.size(); ++i) step->whole_sent[i].copy_(whole_of(source, parts.whole[i]));
    step->reduction = comm.all_reduce_async(memory.first, dist::ReduceOp::Sum);

    // Once P is reduced: the whole gradients' mean written to the buffer, and Q = M^T P started.
    auto advance = [state_ptr = state_, step, &memory] {
      const double epsilon = state_ptr->options().orthogonalization_epsilon();
      const int world = step->comm->size();
      step->reduction.wait();
      for (size_t i = 0; i < step->parts.whole.size(); ++i) {
        whole_of(step->bucket.buffer, step->parts.whole[i]).copy_(step->whole_sent[i].div_(world));
      }
      for (Compressed& c : step->compressed) orthogonalize(c.p, epsilon);
      for (Compressed& c : step->compressed) at::bmm_out(c.q, c.matrix.transpose(1, 2), c.p);
      // Every rank reached this bucket's first collective, checked, and derives Q's shape from it.
      const dist::AgreementImplied checked_with_p;
      step->reduction = step->comm->all_reduce_async(memory.q, dist::ReduceOp::Sum);
    };
    // Once Q is reduced: each gradient becomes P Q^T / world; what that left out of the input is
    // this rank's error for the next step.
    auto then = [state_ptr = state_, step, &memory] {
      PowerSGDState& state = *state_ptr;
      step->reduction.wait();
      memory.q.div_(step->comm->size());
      for (Compressed& c : step->compressed) at::bmm_out(c.approximation, c.p, c.q.transpose(1, 2));
      if (state.options().use_error_feedback()) memory.error.sub_(step->bucket.buffer);
      if (!state.options().warm_start()) memory.q = at::Tensor();
      state.end_bucket(step->bucket, step->parts.stats);
    };
    return PendingReduction::in_stages(std::move(advance), std::move(then),
                                       parts.stats.after * static_cast<int64_t>(input.element_size()));
  }

 private:
  std::shared_ptr<PowerSGDState> state_;
};

namespace comm_hooks {

CommHook powersgd(std::shared_ptr<PowerSGDState> state) {
  DPT_CHECK(state, ConfigError, "the PowerSGD hook needs a state");
  return PowerSGDHook(std::move(state));
}

}  // namespace comm_hooks
}  // namespace dpt
