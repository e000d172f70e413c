#include "dptrain/parallel/ps/client.h"

#include <torch/utils.h>

#include <iostream>

#include "dptrain/common/error.h"
#include "message.h"

namespace dpt::ps {

namespace {

std::vector<NamedParameter> named(const std::vector<ServedParameter>& params) {
  std::vector<NamedParameter> named;
  for (const auto& p : params) named.push_back(NamedParameter{p.name, p.tensor});
  return named;
}

}  // namespace

ParameterServerClient::ParameterServerClient(std::vector<ServedParameter> params,
                                             std::shared_ptr<dist::Communicator> world, PsOptions options)
    : params_(std::move(params)),
      world_(std::move(world)),
      options_(options),
      roles_(world_->size(), options.servers()),
      layout_(served_tensors(params_), options.servers(), options.buckets()) {
  DPT_CHECK(!roles_.is_server(world_->rank()), ConfigError, "rank ", world_->rank(), " is a server of ",
            roles_.world_size, " processes with ", roles_.servers, " server(s), not a worker");
  for (const auto& p : params_) {
    DPT_CHECK(p.tensor.scalar_type() == at::kFloat && p.tensor.device().is_cpu(), ConfigError, who(), ": parameter '",
              p.name, "' is ", p.tensor.toString(), "; the parameter server serves float32 CPU ", "parameters");
  }
  reducer_ = std::make_unique<Reducer>(named(params_), world_, options_.buckets());
  DPT_ASSERT(reducer_->bucket_indices() == layout_.buckets(), "the reducer's buckets differ from the shard layout's");
  for (size_t b = 0; b < layout_.bucket_count(); ++b) {
    pulled_.push_back(at::zeros({layout_.bucket_numel(b)}, at::kFloat));
    outbox_.emplace_back();
    for (int s = 0; s < roles_.servers; ++s) {
      outbox_[b].push_back(at::zeros({wire::kHeaderFloats + layout_.chunk(b, s).numel}, at::kFloat));
    }
  }
  reducer_->set_comm_hook([this](dist::Communicator&, const GradBucket& bucket) { return push(bucket); });
}

ParameterServerClient::~ParameterServerClient() {
  try {
    stop();
  } catch (const std::exception& e) {
    std::cerr << e.what() << std::endl;  // a destructor does not throw; the servers time out instead
  }
}

std::string ParameterServerClient::who() const { return str("rank ", world_->rank(), " (parameter-server worker)"); }

void ParameterServerClient::start(const std::vector<at::Tensor>& momentum) {
  DPT_CHECK(!started_, ConfigError, who(), ": start() was called twice");
  started_ = true;
  torch::NoGradGuard no_grad;
  if (world_->rank() == 0) {
    const bool has_momentum = !momentum.empty() && std::all_of(momentum.begin(), momentum.end(),
                                                               [](const at::Tensor& m) { return m.defined(); });
    for (size_t b = 0; b < layout_.bucket_count(); ++b) {
      // The bucket's weights and momentum, flat in its layout.
      at::Tensor flat = at::zeros({2 * layout_.bucket_numel(b)}, at::kFloat);
      for (size_t i : layout_.bucket(b)) {
        const int64_t offset = layout_.placement(i).offset, n = params_[i].tensor.numel();
        flat.narrow(0, offset, n).copy_(params_[i].tensor.reshape({-1}));
        if (has_momentum) flat.narrow(0, layout_.bucket_numel(b) + offset, n).copy_(momentum[i].reshape({-1}));
      }
      for (int s = 0; s < roles_.servers; ++s) {
        const Chunk c = layout_.chunk(b, s);
        at::Tensor message = at::empty({wire::kHeaderFloats + 2 * c.numel}, at::kFloat);
        wire::Header header;
        header.request = wire::Request::State;
        header.has_momentum = has_momentum ? 1 : 0;
        wire::write_header(message, header);
        wire::payload(message, 0, c.numel).copy_(flat.narrow(0, c.offset, c.numel));
        wire::payload(message, c.numel, c.numel).copy_(flat.narrow(0, layout_.bucket_numel(b) + c.offset, c.numel));
        dist::CollectiveLabel label(str("the starting weights of bucket ", b));
        world_->send(message, roles_.server_rank(s), wire::state_tag(b));
      }
    }
  }
  const ServedState state = fetch_state();
  for (size_t i = 0; i < params_.size(); ++i) params_[i].tensor.detach().copy_(state.weights[i]);
}

void ParameterServerClient::prepare_for_backward(double lr, int64_t step) {
  DPT_CHECK(started_ && !stopped_, ConfigError, who(), ": prepare_for_backward() needs start() first, and no stop()");
  lr_ = lr;
  step_ = step;
  reducer_->prepare_for_backward();
}

PendingReduction ParameterServerClient::push(const GradBucket& bucket) {
  const size_t b = bucket.index;
  // (std::function, which holds the wait, copies what it holds; a Work only moves.)
  auto works = std::make_shared<std::vector<dist::Work>>();
  dist::CollectiveLabel label(str("bucket ", b, " of step ", step_));
  for (int s = 0; s < roles_.servers; ++s) {
    const Chunk c = layout_.chunk(b, s);
    const int server = roles_.server_rank(s);
    at::Tensor& message = outbox_[b][s];
    wire::Header header;
    header.step = step_;
    header.lr = lr_;
    wire::write_header(message, header);
    wire::payload(message, 0, c.numel).copy_(bucket.buffer.narrow(0, c.offset, c.numel));
    works->push_back(world_->send_async(message, server, wire::push_tag(b)));
    if (c.numel == 0) continue;
    works->push_back(world_->recv_async(pulled_[b].narrow(0, c.offset, c.numel), server, wire::push_tag(b)));
  }
  return PendingReduction(dist::Work(), [this, works] {
    for (auto& work : *works) work.wait();
    pulled_this_step_ = true;
  });
}

void ParameterServerClient::synchronize() {
  if (!pulled_this_step_) return;
  pulled_this_step_ = false;
  torch::NoGradGuard no_grad;
  for (size_t i = 0; i < params_.size(); ++i) {
    const Placement& at = layout_.placement(i);
    at::Tensor p = params_[i].tensor.detach();
    p.copy_(pulled_[at.bucket].narrow(0, at.offset, p.numel()).view(p.sizes()));
  }
}

void ParameterServerClient::send_request(wire::Request request) {
  dist::CollectiveLabel label(wire::to_string(request));
  for (int s = 0; s < roles_.servers; ++s) {
    at::Tensor& message = outbox_[0][s];
    wire::Header header;
    header.step = step_;
    header.request = request;
    wire::write_header(message, header);
    world_->send(message, roles_.server_rank(s), wire::push_tag(0));
  }
}

ServedState ParameterServerClient::fetch_state() {
  send_request(wire::Request::State);
  ServedState state;
  bool has_momentum = true;
  std::vector<at::Tensor> flat;  // [bucket]: weights, then momentum
  for (size_t b = 0; b < layout_.bucket_count(); ++b) {
    flat.push_back(at::zeros({2 * layout_.bucket_numel(b)}, at::kFloat));
    for (int s = 0; s < roles_.servers; ++s) {
      const Chunk c = layout_.chunk(b, s);
      at::Tensor message = at::empty({wire::kHeaderFloats + 2 * c.numel}, at::kFloat);
      dist::CollectiveLabel label(str("bucket ", b, "'s state"));
      world_->recv(message, roles_.server_rank(s), wire::state_tag(b));
      has_momentum = has_momentum && wire::read_header(message).has_momentum != 0;
      flat[b].narrow(0, c.offset, c.numel).copy_(wire::payload(message, 0, c.numel));
      flat[b].narrow(0, layout_.bucket_numel(b) + c.offset, c.numel).copy_(wire::payload(message, c.numel, c.numel));
    }
  }
  for (size_t i = 0; i < params_.size(); ++i) {
    const Placement& at = layout_.placement(i);
    const auto sizes = params_[i].tensor.sizes();
    const int64_t n = params_[i].tensor.numel();
    state.weights.push_back(flat[at.bucket].narrow(0, at.offset, n).view(sizes).clone());
    state.momentum.push_back(
        has_momentum ? flat[at.bucket].narrow(0, layout_.bucket_numel(at.bucket) + at.offset, n).view(sizes).clone()
                     : at::Tensor());
  }
  return state;
}

void ParameterServerClient::stop() {
  if (stopped_ || !started_) return;
  stopped_ = true;
  send_request(wire::Request::Stop);
}

int64_t ParameterServerClient::bytes_pushed_per_step() const {
  int64_t floats = 0;
  for (size_t b = 0; b < layout_.bucket_count(); ++b) {
    floats += layout_.bucket_numel(b) + roles_.servers * wire::kHeaderFloats;
  }
  return floats * static_cast<int64_t>(sizeof(float));
}

}  // namespace dpt::ps
