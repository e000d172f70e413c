#include <gtest/gtest.h>

#include <array>
#include <cstdio>
#include <fstream>
#include <memory>
#include <string>

#include "cli_docs.h"
#include "support/temp_dir.h"

namespace cli_docs_test {

// A command line with what the generators must tell apart: a positional, an option with a
// default, a flag, a hidden option and a hidden command, and text roff would otherwise read.
struct Tool {
  CLI::App root{"tool: does things", "tool"};
  std::string data, secret, mode = "fast";
  int count = 1;
  bool fast = false;
  Tool() {
    CLI::App* run = root.add_subcommand("run", "Run it on C:\\data\n.and nothing else");
    run->add_option("data", data, "the data folder")->required();
    run->add_option("-n,--count", count, "how many")->capture_default_str();
    run->add_flag("--fast", fast, "go fast");
    run->add_option("-m,--mode", mode, "how")->check(CLI::IsMember({"fast", "exact"}));
    run->add_option("--secret", secret, "never listed")->group("");
    root.add_subcommand("internal", "never listed")->group("");
  }
};

bool contains(const std::string& text, const std::string& part) { return text.find(part) != std::string::npos; }

TEST(ManualPage, ListsEveryVisibleCommandAndOptionInRoff) {
  Tool tool;
  const std::string page = dpt::cli::manual_page(tool.root, "tool 1.2.3");
  EXPECT_TRUE(contains(page, ".TH tool 1 \"\" \"tool 1.2.3\" \"User Commands\"\n")) << page;
  EXPECT_TRUE(contains(page, ".SH NAME\ntool \\- does things\n")) << page;
  EXPECT_TRUE(contains(page, ".SS \"run\"\n\\fBtool run\\fR [\\fIOPTIONS\\fR] \\fIdata\\fR\n")) << page;
  // An option with its value's type and its default; a flag with neither.
  EXPECT_TRUE(contains(page, ".TP\n\\fB\\-n\\fR, \\fB\\-\\-count\\fR \\fIINT\\fR\nhow many (default: 1)\n")) << page;
  EXPECT_TRUE(contains(page, ".TP\n\\fB\\-\\-fast\\fR\ngo fast\n")) << page;
  EXPECT_TRUE(contains(page, ".TP\n\\fIdata\\fR\nthe data folder\n")) << page;
  // A backslash printed as one, and a line starting with '.' kept as text, not a request.
  EXPECT_TRUE(contains(page, "Run it on C:\\edata\n\\&.and nothing else\n")) << page;
  EXPECT_FALSE(contains(page, "secret")) << page;
  EXPECT_FALSE(contains(page, "internal")) << page;
}

// What bash completes for `line` (its last word being completed) with the script sourced.
std::string complete(const std::string& script, const std::string& line) {
  dpt::testing::TempDir dir;
  const std::string file = dir.path() + "/completion.bash";
  std::ofstream(file) << script;
  const std::string command = "cd " + dir.path() + " && bash -c 'source completion.bash; COMP_WORDS=(" + line +
                              "); COMP_CWORD=$((${#COMP_WORDS[@]} - 1)); _tool; echo \"${COMPREPLY[*]}\"'";
  std::unique_ptr<FILE, int (*)(FILE*)> pipe(popen(command.c_str(), "r"), pclose);
  std::string out;
  std::array<char, 256> chunk;
  while (pipe && fgets(chunk.data(), chunk.size(), pipe.get())) out += chunk.data();
  if (!out.empty() && out.back() == '\n') out.pop_back();
  return out;
}

TEST(BashCompletion, CompletesCommandsThenTheirFlagsThenValues) {
  Tool tool;
  const std::string script = dpt::cli::bash_completion(tool.root);
  EXPECT_TRUE(contains(script, "complete -F _tool tool\n")) << script;
  EXPECT_EQ(complete(script, "tool r"), "run");
  EXPECT_EQ(complete(script, "tool i"), "");  // hidden
  EXPECT_EQ(complete(script, "tool run --c"), "--count");
  EXPECT_EQ(complete(script, "tool run --f"), "--fast");
  EXPECT_EQ(complete(script, "tool run --s"), "");  // hidden
  // After a flag that takes a value the word is that value (a file name here), never a flag;
  // after one that takes none it is a flag again.
  EXPECT_EQ(complete(script, "tool run -n --f"), "");
  EXPECT_EQ(complete(script, "tool run --fast --f"), "--fast");
  EXPECT_EQ(complete(script, "tool run compl"), "completion.bash");
  // A flag with a fixed set of values completes those.
  EXPECT_EQ(complete(script, "tool run --mode \"\""), "fast exact");
  EXPECT_EQ(complete(script, "tool run -m ex"), "exact");
}

}  // namespace cli_docs_test
