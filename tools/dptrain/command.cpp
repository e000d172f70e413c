#include "command.h"

#include <iostream>

#include "dptrain/common/error.h"

namespace dpt::cli {

int run_commands(CLI::App& app, const std::vector<Command>& commands, int argc, char** argv) {
  int own_args = argc;
  std::vector<std::string> program;
  for (int i = 1; i < argc; ++i) {
    if (std::string(argv[i]) == "--") {
      own_args = i;
      program.assign(argv + i + 1, argv + argc);
      break;
    }
  }
  try {
    // Flags whose text the library reads may throw its ConfigError while CLI11 parses.
    app.parse(own_args, argv);
    for (const auto& command : commands) {
      if (!command.app->parsed()) continue;
      if (own_args != argc && !command.takes_program) {
        throw ConfigError("'dptrain " + command.app->get_name() + "' takes no '-- PROGRAM' part");
      }
      return command.run(program);
    }
  } catch (const CLI::ParseError& e) {
    return app.exit(e);
  } catch (const ConfigError& e) {
    std::cerr << "dptrain: error: " << e.what() << std::endl;
    return 2;
  } catch (const std::exception& e) {
    std::cerr << "dptrain: error: " << e.what() << std::endl;
    return 1;
  }
  return 0;
}

}  // namespace dpt::cli
