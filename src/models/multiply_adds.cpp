#include "dptrain/models/multiply_adds.h"

#include <cstring>
#include <memory>

#include "dptrain/common/error.h"

namespace dpt::models {
namespace {

// What the callbacks add to: RecordFunction takes plain function pointers, so the counter of
// this thread is found here.
struct ThreadTally {
  bool counting = false;
  double total = 0;
  int inside_counted = 0;  // counted operations open on this thread
};
thread_local ThreadTally tally;

// Marks a counted operation, so that its end closes it.
struct Counted : at::ObserverContext {};

int64_t product(c10::IntArrayRef sizes, size_t from = 0, size_t to = SIZE_MAX) {
  int64_t p = 1;
  for (size_t i = from; i < sizes.size() && i < to; ++i) p *= sizes[i];
  return p;
}

// A list argument of aten::convolution (stride, padding, dilation): one value per spatial
// dimension, or one for all.
int64_t spatial(const std::vector<int64_t>& values, size_t dim) { return values.size() == 1 ? values[0] : values[dim]; }

double convolution(c10::ArrayRef<const c10::IValue> in) {
  // convolution(input, weight, bias, stride, padding, dilation, transposed, output_padding, groups)
  const auto input = in[0].toTensor().sizes();
  const auto weight = in[1].toTensor().sizes();
  // Each output element (each input element, transposed) takes in_channels/groups x kernel products.
  const double per_element = static_cast<double>(product(weight, 1));
  if (in[6].toBool()) return per_element * product(input);
  const auto stride = in[3].toIntVector();
  const auto padding = in[4].toIntVector();
  const auto dilation = in[5].toIntVector();
  double outputs = static_cast<double>(input[0] * weight[0]);
  for (size_t d = 0; d + 2 < input.size(); ++d) {
    const int64_t extent = dilation.empty() ? weight[d + 2] : spatial(dilation, d) * (weight[d + 2] - 1) + 1;
    outputs *= (input[d + 2] + 2 * spatial(padding, d) - extent) / spatial(stride, d) + 1;
  }
  return outputs * per_element;
}

// (..., n, k) x (..., k, m): n k m products per matrix of the batch.
double matrix_product(const at::Tensor& a, const at::Tensor& b) {
  const auto as = a.sizes();
  return static_cast<double>(product(as, 0, as.size() - 1)) * as.back() * b.sizes().back();
}

double attention(c10::ArrayRef<const c10::IValue> in) {
  // (..., L, E) queries against (..., S, E) keys, weights over (..., S, Ev) values.
  const auto q = in[0].toTensor().sizes();
  const auto k = in[1].toTensor().sizes();
  const auto v = in[2].toTensor().sizes();
  const double scores = static_cast<double>(product(q, 0, q.size() - 1)) * k[k.size() - 2];
  return scores * q.back() + scores * v.back();
}

std::unique_ptr<at::ObserverContext> on_start(const at::RecordFunction& fn) {
  if (!tally.counting) return nullptr;
  const char* name = fn.name();
  const auto is = [name](const char* op) { return std::strcmp(name, op) == 0; };
  const bool conv = is("aten::convolution");
  const bool mm = is("aten::mm") || is("aten::bmm");
  const bool addmm = is("aten::addmm") || is("aten::baddbmm");
  const bool sdpa = is("aten::scaled_dot_product_attention");
  if (!(conv || mm || addmm || sdpa)) return nullptr;
  if (tally.inside_counted++ == 0) {
    const auto in = fn.inputs();
    if (conv) tally.total += convolution(in);
    if (mm) tally.total += matrix_product(in[0].toTensor(), in[1].toTensor());
    if (addmm) tally.total += matrix_product(in[1].toTensor(), in[2].toTensor());
    if (sdpa) tally.total += attention(in);
  }
  return std::make_unique<Counted>();
}

void on_end(const at::RecordFunction&, at::ObserverContext* context) {
  if (context != nullptr) --tally.inside_counted;
}

}  // namespace

MultiplyAddCounter::MultiplyAddCounter() {
  DPT_ASSERT(!tally.counting, "MultiplyAddCounter: counters do not nest");
  tally = ThreadTally{true, 0.0, 0};
  handle_ = at::addThreadLocalCallback(
      at::RecordFunctionCallback(on_start, on_end).needsInputs(true).scopes({at::RecordScope::FUNCTION}));
}

MultiplyAddCounter::~MultiplyAddCounter() {
  at::removeCallback(handle_);
  tally.counting = false;
}

double MultiplyAddCounter::total() const { return tally.total; }

double forward_multiply_adds(Classifier& model, int64_t image_size) {
  // Eval mode for the count, the caller's mode back afterwards, whatever the forward throws.
  struct EvalMode {
    Classifier& model;
    const bool was_training = model->is_training();
    explicit EvalMode(Classifier& m) : model(m) { model->eval(); }
    ~EvalMode() { model->train(was_training); }
  } eval_mode(model);
  torch::NoGradGuard no_grad;
  const auto parameters = model->parameters();
  auto options = torch::TensorOptions().dtype(torch::kFloat);
  if (!parameters.empty()) options = options.device(parameters.front().device());
  MultiplyAddCounter counter;
  model->forward(torch::zeros({1, 3, image_size, image_size}, options));
  return counter.total();
}

}  // namespace dpt::models
