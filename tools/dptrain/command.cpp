#include "command.h"

#include <cctype>
#include <cerrno>
#include <cstdlib>
#include <iostream>
#include <set>

#include "dptrain/common/error.h"
#include "dptrain/common/text.h"

namespace dpt::cli {

namespace {

// The words CLI11 reads as a flag's value in every release dptrain builds against, case aside.
bool is_flag_word(const std::string& value) {
  if (value.empty()) return true;  // `--flag=` is the flag alone
  static const std::set<std::string> words = {"true", "false", "on", "off", "yes", "no", "enable", "disable",
                                              "t", "f", "y", "n", "+", "-"};
  return words.count(ascii_lower(value)) > 0;
}

// A decimal count that fits a 64-bit number, as CLI11 adds a flag's `=N` up.
bool is_flag_count(const std::string& value) {
  const std::size_t digits = (!value.empty() && (value[0] == '+' || value[0] == '-')) ? 1 : 0;
  if (value.size() == digits) return false;
  for (std::size_t i = digits; i < value.size(); ++i) {
    if (!std::isdigit(static_cast<unsigned char>(value[i]))) return false;
  }
  errno = 0;
  std::strtoll(value.c_str(), nullptr, 10);
  return errno != ERANGE;
}

CLI::App* subcommand_named(CLI::App& app, const std::string& name) {
  for (CLI::App* sub : app.get_subcommands([](CLI::App*) { return true; })) {
    if (sub->check_name(name)) return sub;
  }
  return nullptr;
}

// Refuses `--flag=VALUE` where VALUE is neither a flag word nor a count that fits a number. CLI11's
// releases disagree on those: 2.1 let stoll's std::out_of_range escape (the command said
// "dptrain: error: stoll"; found by fuzz/train_cli), 2.4 keeps a count past int64 as text and reads
// it as true, so `--no-checkpoint-async=77777777777777777777777` switched background checkpoints on.
// Checking first gives every build one answer.
void check_flag_values(CLI::App& app, int argc, const char* const* argv) {
  CLI::App* current = &app;
  for (int i = 1; i < argc; ++i) {
    const std::string arg = argv[i];
    if (arg.rfind("--", 0) != 0) {
      if (CLI::App* sub = subcommand_named(*current, arg)) current = sub;
      continue;
    }
    const auto equals = arg.find('=');
    if (equals == std::string::npos) continue;
    const CLI::Option* option = current->get_option_no_throw(arg.substr(0, equals));
    if (option == nullptr || option->get_expected_max() != 0) continue;  // not a flag: CLI11 checks it
    const std::string value = arg.substr(equals + 1);
    if (!is_flag_word(value) && !is_flag_count(value)) {
      throw ConfigError(arg + ": a flag takes true or false (on/off, yes/no, 1/0) or a count such as " +
                        arg.substr(0, equals) + "=2 that fits a 64-bit number");
    }
  }
}

}  // namespace

void parse_command_line(CLI::App& app, int argc, const char* const* argv) {
  check_flag_values(app, argc, argv);
  app.parse(argc, argv);
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
