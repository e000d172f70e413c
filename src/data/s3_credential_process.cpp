// A profile's credential_process (s3_settings.h): the program the AWS tools run for a key, with
// their contract: its words split as a shell splits them but run without one, its standard output
// one JSON object of version 1, its standard error the user's to read.
#include <wordexp.h>

#include <memory>
#include <string>
#include <vector>

#include "dptrain/common/bounded_command.h"
#include "dptrain/common/error.h"
#include "dptrain/common/text.h"
#include "s3_key_sources.h"

namespace dpt::data {

namespace {

// The command's words: quotes and backslashes as the shell reads them, ~ and $VARIABLES expanded,
// never a command substitution (WRDE_NOCMD).
std::vector<std::string> split_words(const std::string& command, const std::string& source) {
  wordexp_t words{};
  const int failed = ::wordexp(command.c_str(), &words, WRDE_NOCMD);
  std::unique_ptr<wordexp_t, void (*)(wordexp_t*)> owned(failed == 0 ? &words : nullptr, ::wordfree);
  DPT_CHECK(failed == 0 && words.we_wordc > 0, ConfigError, source, " ('", command, "') is not a command line: ",
            failed == WRDE_CMDSUB ? "it asks for a command substitution, which is not run"
            : failed == WRDE_BADCHAR ? "it has an unquoted | & ; < > ( ) { } or newline (it is run without a shell)"
            : failed == WRDE_SYNTAX  ? "its quotes do not close"
                                     : "it has no words");
  return std::vector<std::string>(words.we_wordv, words.we_wordv + words.we_wordc);
}

}  // namespace

void take_credential_process_key(S3Settings& settings) {
  const std::string& what = settings.credentials_source;  // "the credential_process of FILE [SECTION]"
  const CommandOutcome ran =
      run_bounded(split_words(settings.credential_process, what), kCredentialProcessBound, /*capture_output=*/true);
  DPT_CHECK(ran.succeeded(), ConfigError, ran.describe(what + " ('" + settings.credential_process + "')"),
            "; run it yourself to see why, or give the key another way");
  const nlohmann::json answer = parse_key_answer(ran.output, what);
  DPT_CHECK(answer.contains("Version") && answer["Version"] == 1, ConfigError, what,
            " did not answer with version 1 of the process credentials (\"Version\": 1)");
  take_key(settings, answer, "SessionToken", what);
}

}  // namespace dpt::data
