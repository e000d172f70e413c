// parameter_server: the tutorials' parameter-server architecture, in C++, on dpt::ps. Of the
// job's processes the last --servers hold shards of a ResNet-20's parameters and run SGD with
// momentum on them; the others are workers: each computes gradients on its shard of the data,
// pushes them to the servers during backward and takes the updated weights back. Synchronous by
// default (the same steps as DistributedDataParallel), or --async (each push applied as it
// arrives: Downpour SGD), or --staleness K. Rank 0 validates alone on the servers' weights.
//
//   dptrain launch --standalone --nproc-per-node 3 -- build/bin/parameter_server --epochs 3
//   dptrain launch --standalone --nproc-per-node 4 -- build/bin/parameter_server --servers 2 --async

#include <chrono>
#include <cstdio>
#include <iostream>

#include <CLI/CLI.hpp>
#include <torch/torch.h>

#include "dptrain/data/sampler.h"
#include "dptrain/dist/init.h"
#include "dptrain/models/resnet.h"
#include "dptrain/parallel/ps.h"
#include "common.h"

namespace {

namespace ps = dpt::ps;

struct PsFlags {
  int servers = 1;
  bool async = false;
  int staleness = 0;
  double momentum = 0.9;
};

std::vector<ps::ServedParameter> served(torch::nn::Module& model) {
  std::vector<ps::ServedParameter> params;
  for (const auto& p : model.named_parameters()) params.push_back({p.key(), p.value(), /*weight_decay=*/5e-4});
  return params;
}

int run(const examples::Flags& flags, const PsFlags& ps_flags) {
  namespace data = dpt::data;
  const auto timeout = std::chrono::milliseconds(static_cast<int64_t>(flags.timeout_s * 1000));
  auto comm = dpt::dist::init_process_group(dpt::dist::InitOptions().init_method(flags.dist_url).timeout(timeout));
  const auto sets = examples::make_datasets(flags);
  torch::manual_seed(0);
  auto model = dpt::models::resnet20(dpt::models::ResNetOptions().num_classes(sets.train->num_classes()));

  const ps::Roles roles(comm->size(), ps_flags.servers);
  auto options = ps::PsOptions().servers(ps_flags.servers).timeout(timeout);
  if (ps_flags.async) options.consistency(ps::Consistency::Async);
  if (ps_flags.staleness > 0) options.consistency(ps::Consistency::Bounded).staleness(ps_flags.staleness);

  if (roles.is_server(comm->rank())) {
    ps::ParameterServer server(served(*model), comm, options, ps::SgdRule().momentum(ps_flags.momentum));
    const auto report = server.serve();
    std::printf("server rank %d: %lld updates, workers at most %lld step(s) apart\n", comm->rank(),
                static_cast<long long>(report.updates), static_cast<long long>(report.max_lead));
    return 0;
  }
  ps::ParameterServerClient client(served(*model), comm, options);
  client.start();  // rank 0's weights become the servers'; every worker takes them
  const int workers = roles.workers(), rank = comm->rank();
  data::DistributedSampler sampler(sets.train->size(), data::SamplerOptions(workers, rank).seed(0));
  if (rank == 0) {
    std::printf("parameter_server: %d worker(s), %d server(s), %s, batch %lld per worker\n", workers,
                ps_flags.servers, ps::to_string(options.consistency()).c_str(),
                static_cast<long long>(flags.batch_size));
  }
  int64_t step = 0;
  for (int epoch = 0; epoch < flags.epochs; ++epoch) {
    const auto start = std::chrono::steady_clock::now();
    model->train();
    sampler.set_epoch(epoch);
    const examples::Totals train =
        examples::train_epoch(flags, sets.train, sampler.indices(), epoch, torch::kCPU,
                              [&](const at::Tensor& images, const at::Tensor& labels) {
                                model->zero_grad();
                                // The global batch is workers x batch: the rate of one synchronous step over it.
                                client.prepare_for_backward(flags.lr * workers, ++step);
                                auto loss = torch::nn::functional::cross_entropy(model->forward(images), labels);
                                loss.backward();       // gradients pushed bucket by bucket
                                client.synchronize();  // the servers' weights are the model's now
                                return loss;
                              });
    const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    if (rank != 0) continue;
    // Rank 0 alone validates, on the servers' weights of the moment: no worker waits for another.
    torch::NoGradGuard no_grad;
    const auto state = client.fetch_state();
    auto params = model->parameters();
    for (size_t i = 0; i < params.size(); ++i) params[i].copy_(state.weights[i]);
    model->eval();
    const auto val = examples::evaluate([&](const at::Tensor& x) { return model->forward(x); }, sets.val,
                                        data::EvalSampler(sets.val->size(), 1, 0).indices(), torch::kCPU);
    examples::print_epoch(epoch, flags.epochs, train, val, seconds);
  }
  client.stop();
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  examples::Flags flags;
  flags.lr = 0.05;  // per worker; scaled by the number of workers
  PsFlags ps_flags;
  CLI::App app{"The parameter-server architecture on dpt::ps; start it with dptrain launch, srun or mpirun"};
  examples::add_flags(app, flags, "per worker");
  app.add_option("--servers", ps_flags.servers, "processes that serve (the job's last ranks)")->capture_default_str();
  app.add_flag("--async", ps_flags.async, "apply each worker's gradients as they arrive");
  app.add_option("--staleness", ps_flags.staleness, "as --async, but no worker more than K steps ahead");
  app.add_option("--momentum", ps_flags.momentum, "the servers' SGD momentum (asynchrony adds its own: try 0.5)")
      ->capture_default_str();
  CLI11_PARSE(app, argc, argv);
  try {
    return run(flags, ps_flags);
  } catch (const std::exception& e) {
    std::cerr << "parameter_server: error: " << e.what() << std::endl;
    return 1;
  }
}
