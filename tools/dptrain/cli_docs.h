#pragma once
// The CLI's own help, written out as a manual page and a bash completion script: both walk the
// CLI11 tree that parses the command line (every subcommand, option, positional and description),
// so neither can drift from what the program accepts. The package installs what these commands
// print (docs_commands.cpp), made at build time (tools/dptrain/CMakeLists.txt):
//
//   dptrain completion bash   # source <(dptrain completion bash)
//   dptrain man               # man -l <(dptrain man)

#include <CLI/CLI.hpp>

#include <string>

namespace dpt::cli {

// roff for man(1), section 1; `version` goes in the page's header (dptrain --version's line).
std::string manual_page(const CLI::App& root, const std::string& version);

// A bash script that defines and registers the completion function for root's name: subcommands,
// then each subcommand's options; an option that takes a value, and a positional, complete file
// names. Hidden options and commands (no group) are left out, as --help leaves them out.
std::string bash_completion(const CLI::App& root);

}  // namespace dpt::cli
