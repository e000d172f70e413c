// libFuzzer target: the readers of a job's launch environment (dist/world.h, dist/node_list.h).
// The input is a Slurm node list on its first line, then KEY=VALUE lines for detect_world: the
// torchrun, Slurm and MPI variables in any combination and with any values. A ConfigError is the
// expected answer to bad values; any other exception, a crash, a sanitizer report or a list whose
// expansion disagrees with its size or first host is a bug.
//
//   scripts/fuzz world 60        # builds with clang (ASan, UBSan) and runs for 60 s

#include <cstddef>
#include <cstdint>
#include <map>
#include <sstream>
#include <string>
#include <vector>

#include "dptrain/common/error.h"
#include "dptrain/dist/node_list.h"
#include "dptrain/dist/world.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  std::istringstream in(std::string(reinterpret_cast<const char*>(data), size));
  std::string nodelist;
  std::getline(in, nodelist);
  try {
    const dpt::dist::NodeList nodes(nodelist);
    // Expanding is linear in the hosts a list names (up to NodeList::kMaxHosts, far more than the
    // 1 s bound allows under the sanitizers): lists of a few thousand hosts exercise it.
    if (nodes.size() <= 4096) {
      const std::vector<std::string> hosts = nodes.expand();
      if (static_cast<int64_t>(hosts.size()) != nodes.size() || hosts.front() != nodes.front()) __builtin_trap();
    }
  } catch (const dpt::ConfigError&) {
  }
  std::map<std::string, std::string> vars;
  for (std::string line; std::getline(in, line);) {
    const size_t equals = line.find('=');
    if (equals != std::string::npos) vars[line.substr(0, equals)] = line.substr(equals + 1);
  }
  try {
    dpt::dist::detect_world(dpt::Environment(vars));
  } catch (const dpt::ConfigError&) {
  }
  return 0;
}
