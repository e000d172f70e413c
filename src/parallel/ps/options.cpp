#include "dptrain/parallel/ps/options.h"

#include "dptrain/common/error.h"

namespace dpt::ps {

Consistency parse_consistency(const std::string& name) {
  if (name == "sync") return Consistency::Sync;
  if (name == "async") return Consistency::Async;
  if (name == "bounded") return Consistency::Bounded;
  throw ConfigError("unknown parameter-server consistency '" + name + "'; use sync, async or bounded");
}

std::string to_string(Consistency consistency) {
  switch (consistency) {
    case Consistency::Sync:
      return "sync";
    case Consistency::Async:
      return "async";
    case Consistency::Bounded:
      return "bounded";
  }
  return "?";
}

Roles::Roles(int world_size, int servers) : world_size(world_size), servers(servers) {
  DPT_CHECK(servers >= 1 && servers < world_size, ConfigError, "a parameter-server job of ", world_size,
            " process(es) cannot have ", servers, " server(s): it needs at least one server and one worker; ",
            "start more processes or lower --ps-servers");
}

std::vector<at::Tensor> served_tensors(const std::vector<ServedParameter>& params) {
  std::vector<at::Tensor> tensors;
  for (const auto& p : params) tensors.push_back(p.tensor);
  return tensors;
}

}  // namespace dpt::ps
