// The key of a role this machine holds (s3_settings.h), as the AWS tools' container and instance
// metadata providers fetch it: a container's from the URL its agent gives (ECS, EKS Pod Identity),
// an instance's from its metadata service, a session token first (IMDSv2), then the role's name,
// then its key. Each request is bounded by a second or two: off EC2 nothing answers.
#include <curl/curl.h>

#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <string>
#include <vector>

#include "curl_ready.h"
#include "dptrain/common/error.h"
#include "dptrain/common/read_file.h"
#include "dptrain/common/text.h"
#include "s3_key_sources.h"

namespace dpt::data {

namespace {

constexpr const char* kContainerHost = "http://169.254.170.2";  // where a relative URI points
constexpr const char* kInstanceMetadataService = "http://169.254.169.254";

struct Reply {
  CURLcode code = CURLE_OK;
  long status = 0;
  std::string body;
  std::string error;  // libcurl's words when nothing answered

  bool answered() const { return code == CURLE_OK; }
  std::string describe() const { return answered() ? "HTTP " + std::to_string(status) : error; }
};

// One request, bounded by the endpoint's timeout, never through a proxy (the endpoint is this
// machine's, or its host's); a request nothing answers, or a 5xx, is made up to `attempts` times.
Reply ask(const char* method, const std::string& url, const std::vector<std::string>& headers,
          const RoleEndpoint& endpoint) {
  ensure_curl();
  Reply reply;
  for (int attempt = 1; attempt <= endpoint.attempts; ++attempt) {
    std::unique_ptr<CURL, void (*)(CURL*)> h(curl_easy_init(), curl_easy_cleanup);
    DPT_CHECK(h != nullptr, DataError, "libcurl could not start a request to ", url);
    std::unique_ptr<curl_slist, void (*)(curl_slist*)> list(nullptr, curl_slist_free_all);
    for (const auto& header : headers) {
      curl_slist* grown = curl_slist_append(list.get(), header.c_str());
      DPT_CHECK(grown != nullptr, DataError, "libcurl could not add a header to a request to ", url);
      list.release();
      list.reset(grown);
    }
    char error[CURL_ERROR_SIZE] = "";
    auto write = +[](char* data, size_t size, size_t count, void* body) -> size_t {
      static_cast<std::string*>(body)->append(data, size * count);
      return size * count;
    };
    reply = Reply();
    curl_easy_setopt(h.get(), CURLOPT_URL, url.c_str());
    curl_easy_setopt(h.get(), CURLOPT_CUSTOMREQUEST, method);
    if (std::strcmp(method, "PUT") == 0) curl_easy_setopt(h.get(), CURLOPT_POSTFIELDS, "");  // no body
    curl_easy_setopt(h.get(), CURLOPT_HTTPHEADER, list.get());
    curl_easy_setopt(h.get(), CURLOPT_PROXY, "");
    curl_easy_setopt(h.get(), CURLOPT_NOSIGNAL, 1L);
    curl_easy_setopt(h.get(), CURLOPT_TIMEOUT_MS, static_cast<long>(endpoint.timeout.count()));
    curl_easy_setopt(h.get(), CURLOPT_ERRORBUFFER, error);
    curl_easy_setopt(h.get(), CURLOPT_WRITEFUNCTION, write);
    curl_easy_setopt(h.get(), CURLOPT_WRITEDATA, &reply.body);
    reply.code = curl_easy_perform(h.get());
    curl_easy_getinfo(h.get(), CURLINFO_RESPONSE_CODE, &reply.status);
    reply.error = error[0] != '\0' ? error : curl_easy_strerror(reply.code);
    if (reply.answered() && reply.status < 500) break;
  }
  return reply;
}

std::string trimmed(const std::string& text) {
  const size_t first = text.find_first_not_of(" \t\r\n");
  if (first == std::string::npos) return "";
  return text.substr(first, text.find_last_not_of(" \t\r\n") - first + 1);
}

// A role's answer: {"Code": "Success", "AccessKeyId": ..., "SecretAccessKey": ..., "Token": ...,
// "Expiration": ...} (an instance's carries a Code, a container's need not).
void take_role_answer(S3Settings& settings, const Reply& reply) {
  const std::string& what = settings.credentials_source;
  DPT_CHECK(reply.answered() && reply.status == 200, ConfigError, what, " gave no key: ", reply.describe());
  const nlohmann::json answer = parse_key_answer(reply.body, what);
  const auto code = answer.find("Code");
  DPT_CHECK(code == answer.end() || *code == "Success", ConfigError, what, " answered with Code ", code->dump(),
            answer.contains("Message") ? ": " + answer["Message"].dump() : std::string());
  take_key(settings, answer, "Token", what);
}

void take_container_key(S3Settings& settings) {
  const RoleEndpoint& role = *settings.role;
  settings.credentials_source = str("the container's role (", role.named_by, " ", role.url, ")");
  std::string authorization = role.authorization;
  if (!role.authorization_file.empty()) {
    const auto token = read_file<std::string>(role.authorization_file);
    DPT_CHECK(token, ConfigError, "cannot read AWS_CONTAINER_AUTHORIZATION_TOKEN_FILE ", role.authorization_file,
              ": ", std::strerror(errno));
    authorization = trimmed(*token);
  }
  std::vector<std::string> headers;
  if (!authorization.empty()) headers.push_back("Authorization: " + authorization);
  take_role_answer(settings, ask("GET", role.url, headers, role));
}

bool take_instance_key(S3Settings& settings) {
  const RoleEndpoint& role = *settings.role;
  // IMDSv2: a session token first, sent with each request; a service that answers the PUT with
  // 403, 404 or 405 speaks only v1.
  const Reply session = ask("PUT", role.url + "/latest/api/token", {"X-aws-ec2-metadata-token-ttl-seconds: 21600"},
                            role);
  if (!session.answered()) return false;  // no metadata service: not an EC2 instance
  std::vector<std::string> headers;
  if (session.status == 200) {
    headers.push_back("X-aws-ec2-metadata-token: " + trimmed(session.body));
  } else {
    DPT_CHECK(session.status == 403 || session.status == 404 || session.status == 405, ConfigError,
              "the instance metadata service at ", role.url, " refused a session token: HTTP ", session.status);
  }
  const std::string roles_url = role.url + "/latest/meta-data/iam/security-credentials/";
  const Reply roles = ask("GET", roles_url, headers, role);
  if (!roles.answered() || roles.status == 404) return false;  // an instance without a role
  const std::string name = trimmed(roles.body.substr(0, roles.body.find('\n')));
  DPT_CHECK(roles.status == 200 && !name.empty(), ConfigError, "the instance metadata service at ", role.url,
            " did not name the instance's role: ", roles.describe());
  settings.credentials_source = str("the role '", name, "' of this instance (its metadata service at ", role.url, ")");
  take_role_answer(settings, ask("GET", roles_url + name, headers, role));
  return true;
}

// A number of seconds or attempts in a variable, in (0, most]; `fallback` when it is unset.
double positive_number(const EnvironmentLookup& environment, const char* name, double fallback, double most) {
  const auto text = environment(name);
  if (!text || text->empty()) return fallback;
  char* end = nullptr;
  const double value = std::strtod(text->c_str(), &end);
  DPT_CHECK(end != text->c_str() && *end == '\0' && value > 0 && value <= most, ConfigError, name, "='", *text,
            "' is not a number in (0, ", most, "]");
  return value;
}

}  // namespace

std::optional<RoleEndpoint> role_endpoint_from(const EnvironmentLookup& environment) {
  auto env = [&](const char* name) { return environment(name).value_or(""); };
  RoleEndpoint role;
  if (!env("AWS_CONTAINER_CREDENTIALS_RELATIVE_URI").empty()) {
    role.named_by = "AWS_CONTAINER_CREDENTIALS_RELATIVE_URI";
    role.url = kContainerHost + env("AWS_CONTAINER_CREDENTIALS_RELATIVE_URI");
  } else if (!env("AWS_CONTAINER_CREDENTIALS_FULL_URI").empty()) {
    role.named_by = "AWS_CONTAINER_CREDENTIALS_FULL_URI";
    role.url = env("AWS_CONTAINER_CREDENTIALS_FULL_URI");
  }
  if (!role.url.empty()) {
    role.kind = RoleEndpoint::Kind::Container;
    role.authorization = env("AWS_CONTAINER_AUTHORIZATION_TOKEN");
    role.authorization_file = env("AWS_CONTAINER_AUTHORIZATION_TOKEN_FILE");
    // The AWS tools' bounds for a container's agent: 2 s a request, 3 attempts.
    role.timeout = std::chrono::milliseconds(2000);
    role.attempts = 3;
    return role;
  }
  if (ascii_lower(env("AWS_EC2_METADATA_DISABLED")) == "true") return std::nullopt;
  role.kind = RoleEndpoint::Kind::Instance;
  role.url = env("AWS_EC2_METADATA_SERVICE_ENDPOINT");
  if (role.url.empty()) role.url = kInstanceMetadataService;
  while (role.url.size() > 1 && role.url.back() == '/') role.url.pop_back();
  role.timeout = std::chrono::milliseconds(
      static_cast<int64_t>(1000 * positive_number(environment, "AWS_METADATA_SERVICE_TIMEOUT", 1, 600)));
  role.attempts = static_cast<int>(positive_number(environment, "AWS_METADATA_SERVICE_NUM_ATTEMPTS", 1, 10));
  return role;
}

bool take_role_key(S3Settings& settings) {
  if (settings.role->kind == RoleEndpoint::Kind::Instance) return take_instance_key(settings);
  take_container_key(settings);  // a container's endpoint, named outright, answers or fails
  return true;
}

}  // namespace dpt::data
