// A profile's credential_process (s3_settings.h): the program the AWS tools run for a key, with
// their contract: its words split as a shell splits them but run without one, its standard output
// one JSON object of version 1, its standard error the user's to read.
#include <wordexp.h>

#include <nlohmann/json.hpp>

#include <ctime>
#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "dptrain/common/bounded_command.h"
#include "dptrain/common/error.h"
#include "dptrain/common/text.h"
#include "dptrain/data/s3_settings.h"

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

// An RFC 3339 time in UTC, as the AWS tools write it: 2026-12-07T10:00:00Z, perhaps with a
// fraction of a second, or +00:00 for Z.
std::chrono::system_clock::time_point parse_utc(const std::string& text, const std::string& what) {
  std::tm fields{};
  const char* rest = ::strptime(text.c_str(), "%Y-%m-%dT%H:%M:%S", &fields);
  if (rest != nullptr && *rest == '.') {
    ++rest;
    while (*rest >= '0' && *rest <= '9') ++rest;
  }
  DPT_CHECK(rest != nullptr && (std::string(rest) == "Z" || std::string(rest) == "+00:00"), ConfigError, what,
            " gave an Expiration of '", text, "', not a UTC time like 2026-12-07T10:00:00Z");
  return std::chrono::system_clock::from_time_t(::timegm(&fields));
}

}  // namespace

void refresh_credentials(S3Settings& settings) {
  const std::string& what = settings.credentials_source;  // "the credential_process of FILE [SECTION]"
  const CommandOutcome ran =
      run_bounded(split_words(settings.credential_process, what), kCredentialProcessBound, /*capture_output=*/true);
  DPT_CHECK(ran.succeeded(), ConfigError, ran.describe(what + " ('" + settings.credential_process + "')"),
            "; run it yourself to see why, or give the key another way");
  nlohmann::json answer;
  try {
    answer = nlohmann::json::parse(ran.output);
  } catch (const nlohmann::json::exception& e) {
    throw ConfigError(str(what, " did not answer with JSON (", e.what(), ")"));
  }
  const bool version_1 = answer.is_object() && answer.contains("Version") && answer["Version"] == 1;
  DPT_CHECK(version_1, ConfigError, what, " did not answer with version 1 of the process credentials (\"Version\": 1)");
  auto text = [&](const char* key, bool required) -> std::string {
    const auto it = answer.find(key);
    const bool given = it != answer.end() && it->is_string() && !it->get<std::string>().empty();
    DPT_CHECK(given || !required, ConfigError, what, " gave no ", key, " (a string) in its answer");
    return given ? it->get<std::string>() : std::string();
  };
  // Every field read and checked before any is taken: an answer refused halfway leaves the old
  // key whole, with its expiration, so the next request asks the process again.
  std::string access_key_id = text("AccessKeyId", true);
  std::string secret_access_key = text("SecretAccessKey", true);
  std::string session_token = text("SessionToken", false);
  const std::string expires = text("Expiration", false);
  std::optional<std::chrono::system_clock::time_point> expiration;
  if (!expires.empty()) expiration = parse_utc(expires, what);
  settings.access_key_id = std::move(access_key_id);
  settings.secret_access_key = std::move(secret_access_key);
  settings.session_token = std::move(session_token);
  settings.expiration = expiration;
}

}  // namespace dpt::data
