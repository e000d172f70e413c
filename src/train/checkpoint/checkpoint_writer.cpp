#include "dptrain/train/checkpoint/checkpoint_writer.h"

#include <torch/csrc/autograd/grad_mode.h>

#include <exception>
#include <utility>

#if defined(__linux__)
#include <sys/resource.h>
#include <sys/syscall.h>
#include <unistd.h>
#endif

#include "dptrain/common/error.h"
#include "dptrain/train/checkpoint/checkpoint_file.h"
#include "non_finite_tensor.h"

namespace dpt::train {
namespace fs = std::filesystem;
namespace {

using Clock = CheckpointWrite::Clock;

double seconds_since(Clock::time_point start) { return std::chrono::duration<double>(Clock::now() - start).count(); }

// `value` with every tensor replaced by `map(tensor)`: dicts, lists and tuples rebuilt, in a
// fixed order of visit; numbers and strings are immutable and shared.
template <typename Map>
c10::IValue map_tensors(const c10::IValue& value, Map& map) {
  if (value.isTensor()) return map(value.toTensor());
  if (value.isGenericDict()) {
    const auto dict = value.toGenericDict();
    c10::impl::GenericDict out(dict.keyType(), dict.valueType());
    for (const auto& item : dict) out.insert(item.key(), map_tensors(item.value(), map));
    return out;
  }
  if (value.isList()) {
    const auto list = value.toList();
    c10::impl::GenericList out(list.elementType());
    for (size_t i = 0; i < list.size(); ++i) out.push_back(map_tensors(list.get(i), map));
    return out;
  }
  if (value.isTuple()) {
    std::vector<c10::IValue> elements;
    for (const auto& element : value.toTuple()->elements()) elements.push_back(map_tensors(element, map));
    return c10::ivalue::Tuple::create(std::move(elements));
  }
  return value;
}

// Host memory for a copy of `tensor`: the source's strides when they are dense (channels_last
// momentum stays channels_last in the file, as a synchronous save writes it), else contiguous.
at::Tensor host_tensor_like(const at::Tensor& tensor) {
  const auto on_host = tensor.options().device(at::kCPU);
  return tensor.is_non_overlapping_and_dense() ? at::empty_strided(tensor.sizes(), tensor.strides(), on_host)
                                               : at::empty(tensor.sizes(), on_host);
}

// A copy of a state in host memory that nothing in training aliases: every tensor copied, into
// the previous snapshot's tensor at the same position when it has the same shape, layout and dtype.
class HostSnapshot {
 public:
  explicit HostSnapshot(std::vector<at::Tensor> spare) : spare_(std::move(spare)) {}

  c10::IValue copy(const c10::IValue& value) { return map_tensors(value, *this); }

  // The snapshot's tensors, in the order copy() met them.
  std::vector<at::Tensor> take() { return std::move(taken_); }

  at::Tensor operator()(const at::Tensor& tensor) {
    if (!tensor.defined()) return tensor;
    const bool dense = tensor.is_non_overlapping_and_dense();
    const size_t position = next_++;
    at::Tensor target;
    if (position < spare_.size()) {
      const at::Tensor& spare = spare_[position];
      if (spare.sizes() == tensor.sizes() && spare.scalar_type() == tensor.scalar_type() &&
          (dense ? spare.strides() == tensor.strides() : spare.is_contiguous())) {
        target = spare;
      }
    }
    if (!target.defined()) target = host_tensor_like(tensor);
    target.copy_(tensor);
    taken_.push_back(target);
    return target;
  }

 private:
  std::vector<at::Tensor> spare_;
  std::vector<at::Tensor> taken_;
  size_t next_ = 0;
};

// checkpoint.pt, pickled straight into the file, then the epoch's file and model_best.pt as further
// names of it (copies where links are refused), each atomically.
CheckpointWrite write_files(const CheckpointRequest& request, CheckpointWrite write) {
  write.began = Clock::now();
  write.file = request.dir / kLatestCheckpointName;
  try {
    if (const auto tensor = first_non_finite_tensor(request.state)) {
      throw CheckpointError(str("its tensor ", *tensor, " holds NaN or an infinity: training has diverged ",
                                "(lower --lr, lengthen --warmup-epochs or clip with --clip-grad-norm)"));
    }
    write.bytes = save_checkpoint(request.state, write.file);
    if (request.epoch_done) {
      link_or_copy_file_atomically(write.file, epoch_checkpoint_path(request.dir, *request.epoch_done));
      rotate_checkpoints(request.dir, request.keep);
    }
    const fs::path best = request.dir / kBestCheckpointName;
    if (request.best == BestModel::Replace || (request.best == BestModel::IfNone && !fs::exists(best))) {
      link_or_copy_file_atomically(write.file, best);
    }
  } catch (const std::exception& e) {
    write.error = e.what();
  }
  write.ended = Clock::now();
  return write;
}

// The calling thread's nice value to the lowest (19). Linux gives each thread its own, so the
// process's other threads keep theirs. Best effort: a refusal leaves the write at normal priority.
void lower_this_threads_priority() {
#if defined(__linux__)
  (void)::setpriority(PRIO_PROCESS, static_cast<id_t>(::syscall(SYS_gettid)), 19);
#endif
}

}  // namespace

CheckpointWriter::CheckpointWriter(CheckpointWriterOptions options) : options_(std::move(options)) {}

CheckpointWriter::~CheckpointWriter() {
  if (in_flight_.valid()) in_flight_.wait();
}

void CheckpointWriter::prepare(const c10::IValue& like) {
  if (!options_.background() || !spare_.empty() || preparing_.valid()) return;
  // Shapes only, as tensors on the meta device (no storage), made here on the caller's thread:
  // the background thread never touches what training changes.
  auto to_meta = [](const at::Tensor& tensor) {
    return tensor.defined() ? at::empty_strided(tensor.sizes(), tensor.strides(), tensor.options().device(at::kMeta))
                            : tensor;
  };
  c10::IValue shapes = map_tensors(like, to_meta);
  preparing_ = std::async(std::launch::async, [low = options_.low_priority(), shapes = std::move(shapes)] {
    if (low) lower_this_threads_priority();
    // In the order a snapshot meets the tensors, each page touched.
    std::vector<at::Tensor> memory;
    auto allocate = [&memory](const at::Tensor& tensor) {
      if (tensor.defined()) memory.push_back(host_tensor_like(tensor).zero_());
      return tensor;
    };
    map_tensors(shapes, allocate);
    return memory;
  });
}

bool CheckpointWriter::prepared() const {
  return preparing_.valid() && preparing_.wait_for(std::chrono::seconds(0)) == std::future_status::ready;
}

bool CheckpointWriter::submit(CheckpointRequest request, WhenBusy when_busy) {
  const auto start = Clock::now();
  if (when_busy == WhenBusy::Skip && busy()) return false;
  wait();
  // prepare()'s memory, once it is ready: never waited for, which would be the stall it avoids.
  if (prepared()) {
    std::vector<at::Tensor> prepared = preparing_.get();
    if (spare_.empty()) spare_ = std::move(prepared);
  }
  CheckpointWrite write;
  write.step = request.step;
  last_step_ = request.step;
  if (!options_.background()) {
    if (options_.before_write()) options_.before_write()();
    write = write_files(request, std::move(write));
    write.paused_s = seconds_since(start);
    done_.push_back(std::move(write));
    return true;
  }
  {
    torch::NoGradGuard no_grad;
    HostSnapshot snapshot(std::move(spare_));
    request.state = snapshot.copy(request.state);
    writing_ = snapshot.take();
  }
  write.paused_s = seconds_since(start);
  in_flight_ = std::async(std::launch::async,
                          [before = options_.before_write(), low = options_.low_priority(), request = std::move(request),
                           write]() mutable {
                            if (low) lower_this_threads_priority();
                            if (before) before();
                            return write_files(request, std::move(write));
                          });
  return true;
}

bool CheckpointWriter::busy() const {
  return in_flight_.valid() && in_flight_.wait_for(std::chrono::seconds(0)) != std::future_status::ready;
}

void CheckpointWriter::wait() {
  if (in_flight_.valid()) collect_in_flight();
}

std::vector<CheckpointWrite> CheckpointWriter::finished() {
  if (in_flight_.valid() && !busy()) collect_in_flight();
  return std::exchange(done_, {});
}

void CheckpointWriter::collect_in_flight() {
  done_.push_back(in_flight_.get());
  spare_ = std::exchange(writing_, {});
}

}  // namespace dpt::train
