// `dptrain completion bash` and `dptrain man`: the command line's own help as a bash completion
// script and a manual page (cli_docs.h), printed for the whole command tree as it is when they run.

#include <iostream>
#include <memory>
#include <string>

#include "cli_docs.h"
#include "command.h"
#include "dptrain/common/error.h"
#include "version.h"

namespace dpt::cli {

Command add_completion_command(CLI::App& root) {
  auto shell = std::make_shared<std::string>();
  CLI::App* app = root.add_subcommand(
      "completion", "Print the shell completion script (bash): source <(dptrain completion bash)");
  app->add_option("shell", *shell, "the shell (bash)")->required();
  return {app, [&root, shell](const std::vector<std::string>&) {
            if (*shell != "bash") throw ConfigError("completion is written for bash only, not '" + *shell + "'");
            std::cout << bash_completion(root);
            return 0;
          }};
}

Command add_man_command(CLI::App& root) {
  CLI::App* app = root.add_subcommand("man", "Print the manual page (roff): man -l <(dptrain man)");
  app->group("");  // the package installs it as dptrain(1); --help need not list it
  return {app, [&root](const std::vector<std::string>&) {
            std::cout << manual_page(root, version_line());
            return 0;
          }};
}

}  // namespace dpt::cli
