// Uses the installed library: world detection and the launcher's worker environment.
#include <iostream>

#include <dptrain/dist/world.h>
#include <dptrain/launch/launcher.h>

int main() {
  auto world = dpt::dist::detect_world(dpt::Environment::current());
  auto options = dpt::launch::resolve(dpt::launch::LaunchOptions().nproc_per_node(2), dpt::Environment());
  auto specs = dpt::launch::make_worker_specs(options, {"true"}, dpt::Environment(), 0);
  std::cout << world.describe() << "; second worker is " << specs[1].name << std::endl;
}
