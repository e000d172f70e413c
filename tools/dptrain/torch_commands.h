#pragma once
// The commands dptrain-torch serves, in the order its help lists them: one list, so that the
// binary and fuzz/commands_cli parse the same command lines.

#include <string_view>
#include <vector>

#include "command.h"

namespace dpt::cli {

// Every command, or with `only`, the one of that name (none if no command has it): the fuzz target
// builds just the command its input names, since building them all (`train` alone has about 120
// flags) took most of each input's time.
std::vector<Command> add_torch_commands(CLI::App& root, std::string_view only = {});

}  // namespace dpt::cli
