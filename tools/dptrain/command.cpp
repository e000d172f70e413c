#include "command.h"

#include <iostream>

#include "dptrain/common/error.h"

namespace dpt::cli {

void parse_command_line(CLI::App& app, int argc, const char* const* argv) {
  try {
    app.parse(argc, argv);
  } catch (const std::out_of_range& e) {
    throw ConfigError(std::string("a number on the command line is too large for its flag (") + e.what() +
                      "): a flag takes true or false, or a count such as --flag=2");
  } catch (const std::invalid_argument& e) {
    throw ConfigError(std::string("a value on the command line is not one its flag takes (") + e.what() +
                      "): a flag takes true or false, or a count such as --flag=2");
  }
}

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
    parse_command_line(app, own_args, argv);
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
