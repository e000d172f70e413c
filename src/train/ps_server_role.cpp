#include "dptrain/train/ps_server_role.h"

#include "dptrain/common/error.h"
#include "dptrain/dist/init.h"
#include "dptrain/train/style_traits.h"
#include "local_setup.h"
#include "styles/ps.h"

namespace dpt::train {

bool serves_parameters(const TrainOptions& options, const Environment& env) {
  check_style_options(options);  // what the servers cannot run is refused first, on every rank alike
  return style_traits(options.parallel().mode()).serves(options, env);
}

ps::ServerReport serve_parameters(TrainOptions options) {
  DPT_CHECK(serves_parameters(options), ConfigError, "serve_parameters: this process is not a server of a --mode ps job ",
            "(the job's last --ps-servers ranks serve)");
  const LocalSetup local = prepare_locally(options);
  auto job = dist::init_process_group(options.parallel().dist());
  ps::ParameterServer server(served_parameters(*local.model, options.optimizer()), job, ps_options(options),
                             ps_sgd_rule(options));
  return server.serve();
}

}  // namespace dpt::train
