#include "dptrain/data/s3_settings.h"

// SimpleIni used as a header only: its definitions compiled here (Debian's header keeps them
// behind SI_IMPLEMENTATION, for its shared library), and the files' keys and values taken as bytes,
// with no conversion to wide characters (which would want its UTF converter).
#define SI_IMPLEMENTATION
#define SI_NO_CONVERSION
#include <SimpleIni.h>

#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <initializer_list>
#include <memory>

#include "dptrain/common/error.h"
#include "dptrain/common/read_file.h"
#include "dptrain/common/text.h"
#include "s3_key_sources.h"

namespace dpt::data {

namespace {

// One of the AWS shared files, parsed; `ini` is null when the file does not exist.
struct SharedFile {
  std::string path;
  std::unique_ptr<CSimpleIniA> ini;

  bool has(const std::string& section) const { return ini && ini->GetSectionSize(section.c_str()) >= 0; }
  // The key's value in the section, or empty.
  std::string value(const std::string& section, const char* key) const {
    const char* v = ini ? ini->GetValue(section.c_str(), key, nullptr) : nullptr;
    return v == nullptr ? "" : v;
  }
};

SharedFile load(const std::string& path) {
  SharedFile file{path, nullptr};
  const auto text = read_file<std::string>(path);
  if (!text) {
    // No file there (nor its folder) is no profile; a file that cannot be read is an error.
    DPT_CHECK(errno == ENOENT || errno == ENOTDIR, ConfigError, "cannot read the AWS file ", path, ": ",
              std::strerror(errno),
              "; make it readable, or name another with AWS_SHARED_CREDENTIALS_FILE or AWS_CONFIG_FILE");
    return file;
  }
  file.ini = std::make_unique<CSimpleIniA>();
  DPT_CHECK(file.ini->LoadData(text->data(), text->size()) >= 0, ConfigError, "cannot parse the AWS file ", path,
            " as INI");
  return file;
}

}  // namespace

S3Settings resolve_s3_settings(const EnvironmentLookup& environment) {
  auto env = [&](const char* name) { return environment(name).value_or(""); };
  // The first of the places a setting may come from that gives it.
  auto first = [](std::initializer_list<std::string> choices) {
    for (const auto& choice : choices) {
      if (!choice.empty()) return choice;
    }
    return std::string();
  };
  const std::string home = env("HOME");
  // The AWS tools expand a leading ~ in the files' variables too.
  auto path = [&](const char* variable, const char* default_name) {
    const std::string named = env(variable);
    if (named.empty()) return home + "/.aws/" + default_name;
    return starts_with(named, "~/") ? home + named.substr(1) : named;
  };
  const SharedFile credentials = load(path("AWS_SHARED_CREDENTIALS_FILE", "credentials"));
  const SharedFile config = load(path("AWS_CONFIG_FILE", "config"));

  const std::string named_by = env("AWS_PROFILE").empty() ? "AWS_DEFAULT_PROFILE" : "AWS_PROFILE";
  const std::string profile = first({env("AWS_PROFILE"), env("AWS_DEFAULT_PROFILE"), "default"});
  // The config file names its sections [profile NAME], except [default].
  const std::string config_section = profile == "default" ? profile : "profile " + profile;
  DPT_CHECK(profile == "default" || credentials.has(profile) || config.has(config_section), ConfigError,
            "the AWS profile '", profile, "' (", named_by, ") is in neither ", credentials.path, " ([", profile,
            "]) nor ", config.path, " ([", config_section, "]); add it to one of them, or name another");

  S3Settings s;
  if (!env("AWS_ACCESS_KEY_ID").empty()) {
    s.access_key_id = env("AWS_ACCESS_KEY_ID");
    s.secret_access_key = env("AWS_SECRET_ACCESS_KEY");
    s.session_token = env("AWS_SESSION_TOKEN");
    s.credentials_source = "AWS_ACCESS_KEY_ID";
    DPT_CHECK(!s.secret_access_key.empty(), ConfigError,
              "AWS_ACCESS_KEY_ID is set but AWS_SECRET_ACCESS_KEY is not; set both, or neither to use the profile '",
              profile, "'");
  } else {
    auto from = [&](const SharedFile& file, const std::string& section) {
      if (file.value(section, "aws_access_key_id").empty()) return false;
      s.access_key_id = file.value(section, "aws_access_key_id");
      s.secret_access_key = file.value(section, "aws_secret_access_key");
      s.session_token = file.value(section, "aws_session_token");
      s.credentials_source = str(file.path, " [", section, "]");
      DPT_CHECK(!s.secret_access_key.empty(), ConfigError, s.credentials_source,
                " has aws_access_key_id but no aws_secret_access_key; add it");
      return true;
    };
    // The AWS tools' order: the credentials file's keys, a credential process (the credentials
    // file's first), the config file's keys.
    auto process = [&](const SharedFile& file, const std::string& section) {
      const std::string command = file.value(section, "credential_process");
      if (command.empty()) return false;
      s.credential_process = command;
      s.credentials_source = str("the credential_process of ", file.path, " [", section, "]");
      take_credential_process_key(s);
      return true;
    };
    if (!from(credentials, profile) && !process(credentials, profile) && !process(config, config_section) &&
        !from(config, config_section)) {
      // Then a role this machine holds, if any: a container's, else the instance's.
      s.role = role_endpoint_from(environment);
      if (s.role && !take_role_key(s)) s.role.reset();
    }
  }
  s.region = first({env("AWS_REGION"), env("AWS_DEFAULT_REGION"), config.value(config_section, "region"), "us-east-1"});
  s.endpoint =
      first({env("AWS_ENDPOINT_URL_S3"), env("AWS_ENDPOINT_URL"), config.value(config_section, "endpoint_url")});
  while (!s.endpoint.empty() && s.endpoint.back() == '/') s.endpoint.pop_back();
  return s;
}

std::string S3Settings::endpoint_url() const {
  return endpoint.empty() ? "https://s3." + region + ".amazonaws.com" : endpoint;
}

bool S3Settings::key_expires_soon(std::chrono::system_clock::time_point now) const {
  return expiration && *expiration - now < kCredentialsRefreshWindow;
}

void refresh_credentials(S3Settings& settings) {
  if (!settings.credential_process.empty()) {
    take_credential_process_key(settings);
  } else if (settings.role) {
    DPT_CHECK(take_role_key(settings), ConfigError, settings.credentials_source,
              " no longer answers, and its key expires soon; check the instance's metadata service");
  }
}

S3Settings s3_settings_from_environment() {
  return resolve_s3_settings([](const std::string& name) -> std::optional<std::string> {
    const char* value = std::getenv(name.c_str());
    if (value == nullptr) return std::nullopt;
    return std::string(value);
  });
}

}  // namespace dpt::data
