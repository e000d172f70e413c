// `dptrain check`: joins the process group and runs every collective once with values whose
// results are known, so a cluster (or a launcher, or a network setting) can be tested before a
// long training run depends on it; each rank also says what it computes with (CPU matrix units,
// BLAS, oneDNN, LibTorch) and warns when the reference BLAS is active. Rank 0 says where the
// rendezvous store listens, and ends with one JSON line.

#include <chrono>
#include <iostream>

#include <nlohmann/json.hpp>

#include "command.h"
#include "number_bounds.h"
#include "dptrain/common/cpu_platform.h"
#include "dptrain/common/error.h"
#include "dptrain/common/job_token.h"
#include "dptrain/common/listening_sockets.h"
#include "dptrain/compat/compat.h"
#include "dptrain/compat/tcp_store.h"
#include "dptrain/dist/init.h"
#include "run_flags.h"

namespace dpt::cli {

namespace {

struct CheckFlags {
  std::string backend = "auto";
  std::string dist_url = "env://";
  std::optional<int> world_size, rank, master_port;
  std::optional<std::string> master_addr, interface;
  double timeout_s = 300;
  std::optional<double> rendezvous_timeout_s;
  bool verbose_rendezvous = false;
  int64_t numel = 1024;
};

double unix_seconds() {
  using namespace std::chrono;
  return duration<double>(system_clock::now().time_since_epoch()).count();
}

void expect_equal(const at::Tensor& got, const at::Tensor& expected, int rank, const std::string& what) {
  if (!got.to(at::kDouble).equal(expected.to(at::kDouble))) {
    throw DistError(str("rank ", rank, ": check ", what, " returned wrong values (first: ",
                        got.flatten()[0].item<double>(), ", expected ", expected.flatten()[0].item<double>(),
                        "). The backend or the network corrupts data."));
  }
}

// One line of what this rank computes with, and a warning when it is the reference BLAS: on a
// cluster, one node left with it makes every rank wait for that node's linear layers.
nlohmann::json describe_compute(int rank) {
  const CpuFeatures cpu = cpu_features();
  const BlasLibrary blas = blas_in_use();
  // PyTorch's wheels link their BLAS and oneDNN into LibTorch: then its own report names them.
  const compat::TorchBuild build = compat::torch_build();
  const std::string blas_text =
      blas.kind == BlasLibrary::Kind::kNone && !build.blas.empty() ? build.blas + ", inside LibTorch" : blas.describe();
  std::optional<std::string> onednn = onednn_version();
  if (!onednn && !build.onednn.empty()) onednn = build.onednn + ", inside LibTorch";
  const bool openmp_sleeps = openmp_threads_sleep();
  std::cout << "rank " << rank << ": CPU " << cpu.model << " (" << cpu.describe() << "); BLAS " << blas_text
            << "; oneDNN " << onednn.value_or("none") << "; LibTorch " << compat::torch_version()
            << "; idle OpenMP threads " << (openmp_sleeps ? "sleep" : "spin (OMP_WAIT_POLICY=passive: they sleep)")
            << std::endl;
  if (blas.is_reference()) std::cerr << "rank " << rank << ": warning: " << blas.advice() << std::endl;
  return {{"cpu", cpu.model},
          {"cpu_isa", cpu.describe()},
          {"bf16_units", cpu.has_bf16_units()},
          {"blas", blas_text},
          {"blas_reference", blas.is_reference()},
          {"onednn", onednn.value_or("")},
          {"openmp_threads_sleep", openmp_sleeps},
          {"libtorch", compat::torch_version()}};
}

// Rank 0 (the store's host for env:// and tcp://): the addresses its store listens on, as the
// kernel lists them, and a warning when one is every interface.
nlohmann::json describe_store_listener(const dist::WorldInfo& world) {
  const std::vector<std::string> addresses = listening_addresses(static_cast<uint16_t>(world.master_port));
  std::string listing;
  bool everywhere = false;
  for (const auto& a : addresses) {
    listing += (listing.empty() ? "" : ", ") + a;
    everywhere = everywhere || is_every_interface(a);
  }
  std::cout << "rank 0: the rendezvous store listens on port " << world.master_port << " of "
            << (listing.empty() ? "no address found in /proc/net" : listing) << std::endl;
  if (everywhere) {
    std::cerr << "rank 0: warning: the rendezvous store accepts connections on every interface"
              << (compat::tcp_store_listens_on_one_address() ? " (--master-addr is a host name, not an IP address)"
                                                              : " (LibTorch " + compat::torch_version() +
                                                                    " cannot bind it to one address)")
              << ": anyone who reaches port " << world.master_port
              << " can read and write it. Keep it behind a firewall (docs/security.md)." << std::endl;
  }
  return addresses;
}

// Rank 0: whether the job admits only the processes that hold its token (dist/admission.h).
bool describe_admission(const Environment& env) {
  const bool token = env.get(kJobTokenVariable).has_value();
  std::cout << "rank 0: admission: "
            << (token ? "only processes that hold this job's token (DPTRAIN_JOB_TOKEN) may join"
                      : "no job token, so any process that reaches the rendezvous store may join; give the job one "
                        "(dptrain launch --job-token FILE, docs/security.md)")
            << std::endl;
  return token;
}

int run_check(const CheckFlags& flags) {
  const auto started = std::chrono::steady_clock::now();
  dist::WorldOverrides world;
  world.rank = flags.rank;
  world.world_size = flags.world_size;
  world.master_addr = flags.master_addr;
  world.master_port = flags.master_port;
  auto options = dist::InitOptions()
                     .backend(flags.backend)
                     .init_method(flags.dist_url)
                     .world(world)
                     .timeout(milliseconds(flags.timeout_s, "--timeout"))
                     .rendezvous_timeout(milliseconds(flags.rendezvous_timeout_s, "--rendezvous-timeout"))
                     .verbose_rendezvous(flags.verbose_rendezvous)
                     .interface(flags.interface);
  auto comm = dist::init_process_group(options);
  const int rank = comm->rank();
  const int n = comm->size();
  const double rendezvous_s = std::chrono::duration<double>(std::chrono::steady_clock::now() - started).count();

  comm->barrier();
  const double first_collective_unix_s = unix_seconds();

  auto on = at::TensorOptions().device(comm->device());
  const int64_t m = flags.numel;
  const double sum_of_ranks = n * (n + 1) / 2.0;  // over values rank+1
  int checks = 1;                                  // the barrier above

  auto check_reduce = [&](dist::ReduceOp op, double expected, at::ScalarType dtype) {
    at::Tensor t = at::full({m}, rank + 1.0, on.dtype(dtype));
    comm->all_reduce(t, op);
    expect_equal(t, at::full({m}, expected, on.dtype(dtype)), rank,
                 "all_reduce(" + dist::to_string(op) + ", " + std::string(c10::toString(dtype)) + ")");
    ++checks;
  };
  check_reduce(dist::ReduceOp::Sum, sum_of_ranks, at::kFloat);
  check_reduce(dist::ReduceOp::Mean, sum_of_ranks / n, at::kDouble);
  check_reduce(dist::ReduceOp::Max, n, at::kFloat);
  check_reduce(dist::ReduceOp::Min, 1, at::kLong);
  check_reduce(dist::ReduceOp::Sum, sum_of_ranks, at::kBFloat16);

  at::Tensor b = at::arange(m, on.dtype(at::kFloat)) + 1000.0 * rank;
  comm->broadcast(b, n - 1);
  expect_equal(b, at::arange(m, on.dtype(at::kFloat)) + 1000.0 * (n - 1), rank, "broadcast");
  ++checks;

  auto gathered = comm->all_gather(at::full({3}, static_cast<double>(rank), on.dtype(at::kFloat)));
  DPT_CHECK(static_cast<int>(gathered.size()) == n, DistError, "rank ", rank, ": all_gather returned ",
            gathered.size(), " tensors for ", n, " ranks");
  for (int r = 0; r < n; ++r) expect_equal(gathered[r], at::full({3}, r, on), rank, "all_gather");
  ++checks;

  at::Tensor scatter_in = at::arange(2 * n, on.dtype(at::kFloat)) * (rank + 1.0);
  at::Tensor slice = comm->reduce_scatter(scatter_in);
  expect_equal(slice, at::arange(2 * rank, 2 * rank + 2, on.dtype(at::kFloat)) * sum_of_ranks, rank,
               "reduce_scatter");
  ++checks;

  const double mean_rank = comm->reduce_value(static_cast<double>(rank));
  DPT_CHECK(mean_rank == (n - 1) / 2.0, DistError, "rank ", rank, ": check reduce_value gave ", mean_rank,
            ", expected ", (n - 1) / 2.0);
  ++checks;

  comm->barrier();
  ++checks;
  const double total_s = std::chrono::duration<double>(std::chrono::steady_clock::now() - started).count();
  std::cout << "rank " << rank << "/" << n << ": " << checks << " collectives correct on "
            << comm->transport() << " (" << comm->world().describe() << ")" << std::endl;
  nlohmann::json compute = describe_compute(rank);
  const bool tcp_store = flags.dist_url.rfind("file://", 0) != 0;
  if (rank == 0) {
    nlohmann::json report = {{"world_size", n},
                             {"backend", comm->backend_name()},
                             {"transport", comm->transport()},
                             {"checks", checks},
                             {"passed", true},
                             {"rendezvous_s", rendezvous_s},
                             {"total_s", total_s},
                             {"first_collective_unix_s", first_collective_unix_s},
                             {"compute", std::move(compute)}};
    if (tcp_store) report["store_listens_on"] = describe_store_listener(comm->world());
    report["job_token"] = describe_admission(Environment::current());
    std::cout << report.dump() << std::endl;
  }
  return 0;
}

}  // namespace

Command add_check_command(CLI::App& root) {
  auto flags = std::make_shared<CheckFlags>();
  CLI::App* app = root.add_subcommand(
      "check", "Join the process group and verify every collective (run under dptrain launch, srun, mpirun)");
  app->add_option("--backend", flags->backend, "gloo, nccl or auto")->capture_default_str();
  app->add_option("--dist-url", flags->dist_url, "env://, tcp://HOST:PORT or file:///PATH")->capture_default_str();
  app->add_option("--world-size", flags->world_size, "number of processes (default: from the environment)");
  app->add_option("--rank", flags->rank, "this process's rank (default: from the environment)");
  app->add_option("--master-addr", flags->master_addr, "rendezvous host (default: MASTER_ADDR)");
  app->add_option("--master-port", flags->master_port, "rendezvous port (default: MASTER_PORT or 29500)");
  app->add_option("--interface", flags->interface, "network interface for Gloo (default: GLOO_SOCKET_IFNAME)");
  app->add_option("--timeout", flags->timeout_s, "seconds any collective may take")->capture_default_str();
  app->add_option("--rendezvous-timeout", flags->rendezvous_timeout_s,
                  "seconds to wait for every rank to join (default: DPTRAIN_RENDEZVOUS_TIMEOUT, else --timeout)");
  app->add_flag("--verbose-rendezvous", flags->verbose_rendezvous,
                "every rank reports who is missing, not only rank 0");
  app->add_option("--numel", flags->numel, "elements per test tensor")->check(at_least(1))->capture_default_str();
  return {app, [flags](const std::vector<std::string>&) { return run_check(*flags); }};
}

}  // namespace dpt::cli
