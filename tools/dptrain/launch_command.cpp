// `dptrain launch [options] -- PROGRAM ARGS`: torchrun for any program (see launch/launcher.h).

#include "command.h"
#include "dptrain/common/error.h"
#include "dptrain/common/job_token.h"
#include "dptrain/launch/launcher.h"
#include "seconds_flag.h"

namespace dpt::cli {

namespace {

struct LaunchFlags {
  std::string nproc_per_node = "auto";
  std::string nnodes = "1";
  int node_rank = 0;
  std::string master_addr = "127.0.0.1";
  int master_port = 29500;
  bool standalone = false;
  int max_restarts = 0;
  std::string on_failure = "restart";
  std::optional<std::string> log_dir;
  std::string gpus;
  std::string run_id;
  double grace_period_s = 5;
  std::string cpu_bind = "cores";
  std::optional<int> rendezvous_timeout_s;
  double last_call_s = 10;
  std::optional<std::string> job_token_file;
  std::string rdzv_backend = "c10d";
  std::string rdzv_endpoint;
};

// A small non-negative decimal number (one that std::stoi cannot overflow on).
bool is_small_count(const std::string& text) {
  return !text.empty() && text.size() < 6 && text.find_first_not_of("0123456789") == std::string::npos;
}

// "a,b,c" into its entries; ConfigError naming `flag` for an empty one.
std::vector<std::string> split_list(const std::string& text, const char* flag) {
  std::vector<std::string> items;
  size_t start = 0;
  while (true) {
    const size_t comma = text.find(',', start);
    items.push_back(text.substr(start, comma == std::string::npos ? std::string::npos : comma - start));
    DPT_CHECK(!items.back().empty(), ConfigError, flag, " '", text, "' has an empty entry");
    if (comma == std::string::npos) return items;
    start = comma + 1;
  }
}

std::vector<int> parse_gpu_list(const std::string& text) {
  std::vector<int> gpus;
  if (text.empty()) return gpus;
  for (const auto& item : split_list(text, "--gpus")) {
    DPT_CHECK(is_small_count(item), ConfigError, "--gpus '", text, "': '", item, "' is not a GPU index; use a list like 1,3");
    gpus.push_back(std::stoi(item));
  }
  return gpus;
}

// "--nnodes N" (a fixed job) or "MIN:MAX" (elastic) into the options.
void parse_nnodes(const std::string& text, launch::LaunchOptions& options) {
  const size_t colon = text.find(':');
  const std::string max = colon == std::string::npos ? text : text.substr(colon + 1);
  const std::string min = colon == std::string::npos ? "" : text.substr(0, colon);
  DPT_CHECK(is_small_count(max) && (colon == std::string::npos || is_small_count(min)), ConfigError, "--nnodes '",
            text, "' is neither a node count (2) nor a range MIN:MAX (2:4)");
  options.nnodes(std::stoi(max));
  if (colon != std::string::npos) options.min_nnodes(std::stoi(min));
}

int run_launch(const LaunchFlags& flags, const std::vector<std::string>& program, const Launcher& elastic,
               const Launcher& fixed) {
  auto options = launch::LaunchOptions()
                     .node_rank(flags.node_rank)
                     .master_addr(flags.master_addr)
                     .master_port(flags.master_port)
                     .standalone(flags.standalone)
                     .max_restarts(flags.max_restarts)
                     .on_failure(flags.on_failure == "continue" ? OnFailure::Continue : OnFailure::Restart)
                     .log_dir(flags.log_dir)
                     .gpus(parse_gpu_list(flags.gpus))
                     .run_id(flags.run_id)
                     .grace_period(milliseconds(flags.grace_period_s, "--grace-period"))
                     .cpu_bind(flags.cpu_bind == "none" ? launch::CpuBind::None : launch::CpuBind::Cores)
                     .last_call(milliseconds(flags.last_call_s, "--rdzv-last-call"));
  parse_nnodes(flags.nnodes, options);
  DPT_CHECK((flags.rdzv_backend == "etcd") == !flags.rdzv_endpoint.empty(), ConfigError,
            flags.rdzv_backend == "etcd" ? "--rdzv-backend etcd needs --rdzv-endpoint HOST:PORT[,HOST:PORT...], the "
                                           "etcd cluster's members"
                                         : "--rdzv-endpoint names etcd's members: add --rdzv-backend etcd (with c10d, "
                                           "--master-addr and --master-port say where the store is)");
  if (flags.rdzv_backend == "etcd") options.etcd_endpoints(split_list(flags.rdzv_endpoint, "--rdzv-endpoint"));
  if (flags.job_token_file) options.job_token(read_job_token_file(*flags.job_token_file));
  if (flags.nproc_per_node != "auto") {
    DPT_CHECK(is_small_count(flags.nproc_per_node), ConfigError, "--nproc-per-node '", flags.nproc_per_node, "' is neither a number nor 'auto'");
    options.nproc_per_node(std::stoi(flags.nproc_per_node));
  }
  Environment env = Environment::current();
  // The workers rendezvous among themselves (init_process_group reads this), across every node.
  if (flags.rendezvous_timeout_s) {
    DPT_CHECK(*flags.rendezvous_timeout_s > 0, ConfigError, "--rendezvous-timeout must be positive, got ",
              *flags.rendezvous_timeout_s);
    env.set("DPTRAIN_RENDEZVOUS_TIMEOUT", std::to_string(*flags.rendezvous_timeout_s));
    options.rendezvous_timeout(std::chrono::seconds(*flags.rendezvous_timeout_s));
  }
  return (options.min_nnodes() || options.on_failure() == OnFailure::Continue ? elastic : fixed)(options, program, env);
}

}  // namespace

Command add_launch_command(CLI::App& root, Launcher elastic, Launcher fixed) {
  auto flags = std::make_shared<LaunchFlags>();
  CLI::App* app = root.add_subcommand(
      "launch", "Run PROGRAM as the local workers of a data-parallel job, torchrun-style: "
                "dptrain launch [options] -- PROGRAM ARGS");
  app->add_option("--nproc-per-node,--nproc_per_node", flags->nproc_per_node,
                  "workers on this node, or 'auto' (one per --gpus entry, CUDA device, or core)")
      ->capture_default_str();
  app->add_option("--nnodes", flags->nnodes,
                  "nodes in the job, or MIN:MAX for an elastic job that re-forms when nodes are lost or join "
                  "(the launcher on --master-addr's machine hosts its rendezvous)")
      ->capture_default_str();
  app->add_option("--node-rank,--node_rank", flags->node_rank, "this node's index (elastic jobs assign it)")
      ->capture_default_str();
  app->add_option("--master-addr,--master_addr", flags->master_addr, "host of rank 0")->capture_default_str();
  app->add_option("--rdzv-last-call", flags->last_call_s,
                  "elastic: seconds a round stays open for more nodes once MIN have joined")
      ->capture_default_str();
  app->add_option("--master-port,--master_port", flags->master_port, "rendezvous port")->capture_default_str();
  app->add_option("--rendezvous-timeout", flags->rendezvous_timeout_s,
                  "seconds the workers wait for every rank of every node to join (exported to them as "
                  "DPTRAIN_RENDEZVOUS_TIMEOUT; dptrain's default: 300)");
  app->add_flag("--standalone", flags->standalone, "single node on loopback with a free port");
  app->add_option("--max-restarts,--max_restarts", flags->max_restarts,
                  "restart the local group this many times after a failure")
      ->capture_default_str();
  app->add_option("--on-failure", flags->on_failure,
                  "when a worker fails: 'restart' stops the others and restarts the group (--max-restarts); "
                  "'continue' leaves them running, to go on without it (dptrain train --on-failure continue), and "
                  "serves their rendezvous store here (node 0), so that they can go on without rank 0 too")
      ->check(CLI::IsMember({"restart", "continue"}))
      ->capture_default_str();
  app->add_option("--rdzv-backend,--rdzv_backend", flags->rdzv_backend,
                  "where the workers' store lives: c10d (rank 0, or under --on-failure continue node 0's "
                  "launcher, serves it) or etcd (an etcd cluster, --rdzv-endpoint; --on-failure continue only), "
                  "so that the job outlives any one machine")
      ->check(CLI::IsMember({"c10d", "etcd"}))
      ->capture_default_str();
  app->add_option("--rdzv-endpoint,--rdzv_endpoint", flags->rdzv_endpoint,
                  "etcd: the cluster's members, HOST:PORT[,HOST:PORT...] (the keys go under --rdzv-id)");
  app->add_option("--log-dir,--log_dir", flags->log_dir, "write each worker's output to LOG_DIR/attempt_K/rank_R.log");
  app->add_option("--gpus", flags->gpus, "GPU indices, one per local worker (e.g. 1,3)");
  app->add_option("--run-id,--rdzv-id", flags->run_id, "job id exported as TORCHELASTIC_RUN_ID");
  app->add_option("--job-token", flags->job_token_file,
                  "file (mode 600) whose first line is the job's secret, the same on every node: only processes "
                  "that hold it may join (exported to the workers as DPTRAIN_JOB_TOKEN; a job of one node "
                  "makes its own)");
  app->add_option("--grace-period", flags->grace_period_s, "seconds between SIGTERM and SIGKILL")
      ->capture_default_str();
  app->add_option("--cpu-bind", flags->cpu_bind,
                  "cores: pin each worker to its own block of the CPUs this command may use (as Open MPI's "
                  "mpirun does); none: leave placement to the kernel")
      ->check(CLI::IsMember({"cores", "none"}))
      ->capture_default_str();
  return {app,
          [flags, elastic, fixed](const std::vector<std::string>& program) {
            return run_launch(*flags, program, elastic, fixed);
          },
          /*takes_program=*/true};
}

}  // namespace dpt::cli
