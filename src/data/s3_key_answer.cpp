#include "s3_key_sources.h"

#include <ctime>
#include <optional>
#include <utility>

#include "dptrain/common/error.h"
#include "dptrain/common/text.h"

namespace dpt::data {

namespace {

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

nlohmann::json parse_key_answer(const std::string& body, const std::string& what) {
  nlohmann::json answer;
  try {
    answer = nlohmann::json::parse(body);
  } catch (const nlohmann::json::exception& e) {
    throw ConfigError(str(what, " did not answer with JSON (", e.what(), ")"));
  }
  DPT_CHECK(answer.is_object(), ConfigError, what, " did not answer with a JSON object");
  return answer;
}

void take_key(S3Settings& settings, const nlohmann::json& answer, const char* token_field, const std::string& what) {
  auto text = [&](const char* key, bool required) -> std::string {
    const auto it = answer.find(key);
    const bool given = it != answer.end() && it->is_string() && !it->get<std::string>().empty();
    DPT_CHECK(given || !required, ConfigError, what, " gave no ", key, " (a string) in its answer");
    return given ? it->get<std::string>() : std::string();
  };
  std::string access_key_id = text("AccessKeyId", true);
  std::string secret_access_key = text("SecretAccessKey", true);
  std::string session_token = text(token_field, false);
  const std::string expires = text("Expiration", false);
  std::optional<std::chrono::system_clock::time_point> expiration;
  if (!expires.empty()) expiration = parse_utc(expires, what);
  settings.access_key_id = std::move(access_key_id);
  settings.secret_access_key = std::move(secret_access_key);
  settings.session_token = std::move(session_token);
  settings.expiration = expiration;
}

}  // namespace dpt::data
