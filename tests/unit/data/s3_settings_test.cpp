#include "dptrain/data/s3_settings.h"

#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <map>
#include <string>

#include "dptrain/common/error.h"
#include "data/s3_key_sources.h"
#include "dptrain/common/read_file.h"
#include "support/temp_dir.h"

using namespace dpt::data;

namespace {

// A home folder with ~/.aws/credentials and ~/.aws/config, and an environment that points at it.
class AwsHome {
 public:
  AwsHome() {
    std::filesystem::create_directories(dir_.path() + "/.aws");
    variables_["HOME"] = dir_.path();
    // An instance metadata service that is not there (nothing listens on port 1): without it the
    // cases below that find no key would ask 169.254.169.254, a real one on a cloud machine.
    variables_["AWS_EC2_METADATA_SERVICE_ENDPOINT"] = "http://127.0.0.1:1";
  }
  std::string path(const std::string& name) const { return dir_.path() + "/" + name; }
  void write(const std::string& name, const std::string& text) const { std::ofstream(path(name)) << text; }
  std::optional<std::string> get(const std::string& name) const {
    const auto it = variables_.find(name);
    if (it == variables_.end()) return std::nullopt;
    return it->second;
  }
  AwsHome& set(const std::string& name, const std::string& value) {
    variables_[name] = value;
    return *this;
  }
  S3Settings resolve() const {
    return resolve_s3_settings([this](const std::string& name) { return get(name); });
  }

 private:
  dpt::testing::TempDir dir_;
  std::map<std::string, std::string> variables_;
};

const char* kCredentials =
    "# written by aws configure\n"
    "[default]\n"
    "aws_access_key_id = DEFAULTKEY\n"
    "aws_secret_access_key = default/secret\n"
    "\n"
    "[ci]\n"
    "aws_access_key_id=CIKEY\n"
    "aws_secret_access_key=ci+secret==\n";

const char* kConfig =
    "[default]\n"
    "region = eu-west-1\n"
    "; a comment\n"
    "[profile ci]\n"
    "region = ap-south-2\n"
    "endpoint_url = http://minio.local:9000/\n"
    "[profile keys-here]\n"
    "aws_access_key_id = CONFIGKEY\n"
    "aws_secret_access_key = config-secret\n"
    "aws_session_token = config-token\n";

}  // namespace

TEST(S3Settings, WithoutAnythingRequestsGoUnsignedToAwsInUsEast1) {
  const S3Settings s = AwsHome().resolve();
  EXPECT_EQ(s.access_key_id, "");
  EXPECT_EQ(s.credentials_source, "");
  EXPECT_FALSE(s.role);  // no metadata service answered
  EXPECT_EQ(s.region, "us-east-1");
  EXPECT_EQ(s.endpoint, "");
  EXPECT_EQ(s.endpoint_url(), "https://s3.us-east-1.amazonaws.com");
}

TEST(S3Settings, TheDefaultProfileGivesKeyAndRegion) {
  AwsHome home;
  home.write(".aws/credentials", kCredentials);
  home.write(".aws/config", kConfig);
  const S3Settings s = home.resolve();
  EXPECT_EQ(s.access_key_id, "DEFAULTKEY");
  EXPECT_EQ(s.secret_access_key, "default/secret");
  EXPECT_EQ(s.session_token, "");
  EXPECT_EQ(s.credentials_source, home.path(".aws/credentials") + " [default]");
  EXPECT_EQ(s.region, "eu-west-1");
  EXPECT_EQ(s.endpoint_url(), "https://s3.eu-west-1.amazonaws.com");
}

// AWS_PROFILE picks [ci] in the credentials file and [profile ci] in the config file, whose
// endpoint_url loses its trailing slash.
TEST(S3Settings, ANamedProfileGivesItsKeyRegionAndEndpoint) {
  AwsHome home;
  home.write(".aws/credentials", kCredentials);
  home.write(".aws/config", kConfig);
  home.set("AWS_PROFILE", "ci");
  const S3Settings s = home.resolve();
  EXPECT_EQ(s.access_key_id, "CIKEY");
  EXPECT_EQ(s.secret_access_key, "ci+secret==");
  EXPECT_EQ(s.credentials_source, home.path(".aws/credentials") + " [ci]");
  EXPECT_EQ(s.region, "ap-south-2");
  EXPECT_EQ(s.endpoint_url(), "http://minio.local:9000");
  // The older variable names a profile too; AWS_PROFILE wins over it.
  EXPECT_EQ(home.set("AWS_DEFAULT_PROFILE", "default").resolve().access_key_id, "CIKEY");
}

TEST(S3Settings, KeysInTheConfigFileServeWhenTheCredentialsFileHasNone) {
  AwsHome home;
  home.write(".aws/credentials", kCredentials);
  home.write(".aws/config", kConfig);
  const S3Settings s = home.set("AWS_DEFAULT_PROFILE", "keys-here").resolve();
  EXPECT_EQ(s.access_key_id, "CONFIGKEY");
  EXPECT_EQ(s.session_token, "config-token");
  EXPECT_EQ(s.credentials_source, home.path(".aws/config") + " [profile keys-here]");
  EXPECT_EQ(s.region, "us-east-1");
}

// The environment's variables come before any file, as for the AWS tools.
TEST(S3Settings, TheEnvironmentWinsOverTheFiles) {
  AwsHome home;
  home.write(".aws/credentials", kCredentials);
  home.write(".aws/config", kConfig);
  home.set("AWS_PROFILE", "ci").set("AWS_ACCESS_KEY_ID", "ENVKEY").set("AWS_SECRET_ACCESS_KEY", "env-secret");
  home.set("AWS_SESSION_TOKEN", "env-token").set("AWS_DEFAULT_REGION", "us-west-2");
  home.set("AWS_ENDPOINT_URL", "http://127.0.0.1:4568");
  S3Settings s = home.resolve();
  EXPECT_EQ(s.access_key_id, "ENVKEY");
  EXPECT_EQ(s.session_token, "env-token");
  EXPECT_EQ(s.credentials_source, "AWS_ACCESS_KEY_ID");
  EXPECT_EQ(s.region, "us-west-2");
  EXPECT_EQ(s.endpoint_url(), "http://127.0.0.1:4568");
  s = home.set("AWS_REGION", "sa-east-1").set("AWS_ENDPOINT_URL_S3", "http://s3.internal").resolve();
  EXPECT_EQ(s.region, "sa-east-1");
  EXPECT_EQ(s.endpoint_url(), "http://s3.internal");
}

// Session tokens run to a thousand characters and more: the line is taken whole.
TEST(S3Settings, FilesNamedByTheirVariablesAndLongTokens) {
  AwsHome home;
  const std::string token(1500, 'T');
  home.write("elsewhere.ini", "[temp]\naws_access_key_id = TEMPKEY\naws_secret_access_key = s\naws_session_token = " +
                                  token + "\nregion = ignored-here\n");
  home.write("config.ini", "[profile temp]\nregion = ca-central-1\n");
  home.set("AWS_SHARED_CREDENTIALS_FILE", "~/elsewhere.ini").set("AWS_CONFIG_FILE", home.path("config.ini"));
  const S3Settings s = home.set("AWS_PROFILE", "temp").resolve();
  EXPECT_EQ(s.access_key_id, "TEMPKEY");
  EXPECT_EQ(s.session_token, token);
  EXPECT_EQ(s.credentials_source, home.path("elsewhere.ini") + " [temp]");
  EXPECT_EQ(s.region, "ca-central-1");  // region comes from the config file only
}

TEST(S3Settings, AMissingProfileOrHalfAKeyIsAConfigError) {
  AwsHome home;
  home.write(".aws/credentials", kCredentials + std::string("[half]\naws_access_key_id = HALF\n"));
  home.write(".aws/config", kConfig);
  try {
    home.set("AWS_PROFILE", "nightly").resolve();
    FAIL() << "a missing profile resolved";
  } catch (const dpt::ConfigError& e) {
    EXPECT_NE(std::string(e.what()).find("the AWS profile 'nightly' (AWS_PROFILE) is in neither " +
                                         home.path(".aws/credentials") + " ([nightly]) nor " +
                                         home.path(".aws/config") + " ([profile nightly])"),
              std::string::npos)
        << e.what();
  }
  EXPECT_THROW(home.set("AWS_PROFILE", "half").resolve(), dpt::ConfigError);
  home.set("AWS_PROFILE", "ci").set("AWS_ACCESS_KEY_ID", "ONLYKEY");
  EXPECT_THROW(home.resolve(), dpt::ConfigError);
}

namespace {

// A credential process in the home folder: a shell script that prints `answer` (and counts its
// runs in runs.txt).
std::string credential_script(const AwsHome& home, const std::string& answer) {
  const std::string script = home.path("get key.sh");
  home.write("get key.sh",
             "#!/bin/sh\necho run >> \"" + home.path("runs.txt") + "\"\ncat <<'END'\n" + answer + "\nEND\n");
  std::filesystem::permissions(script, std::filesystem::perms::owner_all);
  return "\"" + script + "\"";  // quoted: the path has a space
}

std::string error_of(const AwsHome& home) {
  try {
    home.resolve();
  } catch (const dpt::ConfigError& e) {
    return e.what();
  }
  return "(no error)";
}

}  // namespace

TEST(S3Settings, ACredentialProcessGivesTheKeyAndItsExpiration) {
  AwsHome home;
  const std::string process = credential_script(
      home, R"({"Version": 1, "AccessKeyId": "PROCESSKEY", "SecretAccessKey": "process/secret",
                "SessionToken": "process-token", "Expiration": "2026-12-07T10:30:00Z"})");
  home.write(".aws/config", "[profile sso]\nregion = eu-north-1\ncredential_process = " + process + " --profile sso\n");
  const S3Settings s = home.set("AWS_PROFILE", "sso").resolve();
  EXPECT_EQ(s.access_key_id, "PROCESSKEY");
  EXPECT_EQ(s.secret_access_key, "process/secret");
  EXPECT_EQ(s.session_token, "process-token");
  EXPECT_EQ(s.credentials_source, "the credential_process of " + home.path(".aws/config") + " [profile sso]");
  EXPECT_EQ(s.credential_process, process + " --profile sso");
  ASSERT_TRUE(s.expiration);
  EXPECT_EQ(std::chrono::system_clock::to_time_t(*s.expiration), 1796639400);  // date -d 2026-12-07T10:30:00Z +%s
  EXPECT_EQ(s.region, "eu-north-1");
  // Renewed within 10 minutes of its expiration, not before.
  EXPECT_FALSE(s.key_expires_soon(*s.expiration - std::chrono::minutes(11)));
  EXPECT_TRUE(s.key_expires_soon(*s.expiration - std::chrono::minutes(9)));
  EXPECT_TRUE(s.key_expires_soon(*s.expiration + std::chrono::minutes(1)));
}

TEST(S3Settings, RefreshingRunsTheProcessAgain) {
  AwsHome home;
  const std::string process =
      credential_script(home, R"({"Version": 1, "AccessKeyId": "FIRST", "SecretAccessKey": "s"})");
  home.write(".aws/config", "[default]\ncredential_process = " + process + "\n");
  S3Settings s = home.resolve();
  EXPECT_EQ(s.access_key_id, "FIRST");
  EXPECT_FALSE(s.expiration);  // no Expiration: the key does not expire
  EXPECT_FALSE(s.key_expires_soon(std::chrono::system_clock::now() + std::chrono::hours(10000)));
  credential_script(home, R"({"Version": 1, "AccessKeyId": "SECOND", "SecretAccessKey": "t",
                              "Expiration": "2030-01-01T00:00:00.123+00:00"})");
  refresh_credentials(s);
  EXPECT_EQ(s.access_key_id, "SECOND");
  EXPECT_EQ(s.session_token, "");
  ASSERT_TRUE(s.expiration);
  EXPECT_EQ(std::chrono::system_clock::to_time_t(*s.expiration), 1893456000);
  EXPECT_EQ(*dpt::read_file<std::string>(home.path("runs.txt")), "run\nrun\n");
  // An answer refused halfway (a new key, a bad expiration) leaves the old key whole, still due.
  credential_script(home, R"({"Version": 1, "AccessKeyId": "THIRD", "SecretAccessKey": "u", "Expiration": "soon"})");
  EXPECT_THROW(refresh_credentials(s), dpt::ConfigError);
  EXPECT_EQ(s.access_key_id, "SECOND");
  EXPECT_EQ(s.secret_access_key, "t");
  ASSERT_TRUE(s.expiration);
  EXPECT_EQ(std::chrono::system_clock::to_time_t(*s.expiration), 1893456000);
}

// The AWS tools' order: the credentials file's keys, then a process (the credentials file's
// first), then the config file's keys.
TEST(S3Settings, ACredentialProcessComesBetweenTheTwoFilesKeys) {
  AwsHome home;
  const std::string process =
      credential_script(home, R"({"Version": 1, "AccessKeyId": "PROCESSKEY", "SecretAccessKey": "s"})");
  home.write(".aws/credentials", kCredentials);
  home.write(".aws/config", "[default]\ncredential_process = " + process + "\n[profile both]\naws_access_key_id = "
                            "CONFIGKEY\naws_secret_access_key = c\ncredential_process = " + process + "\n");
  EXPECT_EQ(home.resolve().access_key_id, "DEFAULTKEY");
  EXPECT_EQ(home.set("AWS_PROFILE", "both").resolve().access_key_id, "PROCESSKEY");
  home.write(".aws/credentials", "[both]\ncredential_process = sh -c 'exit 7'\n");
  EXPECT_NE(error_of(home).find("the credential_process of " + home.path(".aws/credentials") + " [both] ('sh -c "
                                "'exit 7'') exited with status 7"),
            std::string::npos)
      << error_of(home);
}

TEST(S3Settings, ACredentialProcessThatFailsOrAnswersBadlyIsAConfigError) {
  AwsHome home;
  auto answering = [&](const std::string& answer) -> AwsHome& {
    home.write(".aws/config", "[default]\ncredential_process = " + credential_script(home, answer) + "\n");
    return home;
  };
  const std::map<std::string, std::string> answers = {
      {"not json", "did not answer with JSON"},
      {R"({"Version": 2, "AccessKeyId": "K", "SecretAccessKey": "s"})", "version 1 of the process credentials"},
      {R"({"Version": "1", "AccessKeyId": "K", "SecretAccessKey": "s"})", "version 1 of the process credentials"},
      {R"({"Version": 1, "AccessKeyId": "K"})", "gave no SecretAccessKey (a string)"},
      {R"({"Version": 1, "AccessKeyId": 5, "SecretAccessKey": "s"})", "gave no AccessKeyId (a string)"},
      {R"({"Version": 1, "AccessKeyId": "K", "SecretAccessKey": "s", "Expiration": "tomorrow"})",
       "gave an Expiration of 'tomorrow', not a UTC time"},
      {R"({"Version": 1, "AccessKeyId": "K", "SecretAccessKey": "s", "Expiration": "2026-12-07T10:30:00+02:00"})",
       "not a UTC time"},
  };
  for (const auto& [answer, said] : answers) {
    EXPECT_NE(error_of(answering(answer)).find(said), std::string::npos) << answer << ": " << error_of(home);
  }
  EXPECT_NE(error_of(answering(R"({"Version": 1, "AccessKeyId": "K", "SecretAccessKey": "s"})")).find("(no error)"),
            std::string::npos);
  const std::map<std::string, std::string> commands = {
      {"/nonexistent/get-key", "could not run the credential_process of " + home.path(".aws/config") +
                                   " [default] ('/nonexistent/get-key') (No such file or directory)"},
      {"get-key 'unclosed", "its quotes do not close"},
      {"get-key | tee log", "it is run without a shell"},
      {"get-key $(whoami)", "a command substitution, which is not run"},
  };
  for (const auto& [command, said] : commands) {
    home.write(".aws/config", "[default]\ncredential_process = " + command + "\n");
    EXPECT_NE(error_of(home).find(said), std::string::npos) << command << ": " << error_of(home);
  }
}

// Where a role's key is asked for, as the AWS tools read it (test_train_remote_shards asks a
// metadata service and a container's endpoint on loopback for one).
TEST(S3Settings, TheRoleEndpointsTheEnvironmentNames) {
  AwsHome home;
  auto endpoint = [&] { return role_endpoint_from([&](const std::string& name) { return home.get(name); }); };
  std::optional<RoleEndpoint> role = endpoint();
  ASSERT_TRUE(role);
  EXPECT_EQ(role->kind, RoleEndpoint::Kind::Instance);
  EXPECT_EQ(role->url, "http://127.0.0.1:1");
  EXPECT_EQ(role->timeout, std::chrono::milliseconds(1000));
  EXPECT_EQ(role->attempts, 1);
  home.set("AWS_EC2_METADATA_SERVICE_ENDPOINT", "").set("AWS_METADATA_SERVICE_TIMEOUT", "0.25")
      .set("AWS_METADATA_SERVICE_NUM_ATTEMPTS", "3");
  role = endpoint();
  EXPECT_EQ(role->url, "http://169.254.169.254");
  EXPECT_EQ(role->timeout, std::chrono::milliseconds(250));
  EXPECT_EQ(role->attempts, 3);
  home.set("AWS_METADATA_SERVICE_TIMEOUT", "soon");
  EXPECT_THROW(endpoint(), dpt::ConfigError);
  home.set("AWS_METADATA_SERVICE_TIMEOUT", "1").set("AWS_EC2_METADATA_DISABLED", "TRUE");
  EXPECT_FALSE(endpoint());
  // A container's endpoint comes first, the relative URI before the full one.
  home.set("AWS_CONTAINER_CREDENTIALS_FULL_URI", "http://127.0.0.1:8080/creds")
      .set("AWS_CONTAINER_AUTHORIZATION_TOKEN_FILE", "/var/run/token");
  role = endpoint();
  ASSERT_TRUE(role);
  EXPECT_EQ(role->kind, RoleEndpoint::Kind::Container);
  EXPECT_EQ(role->url, "http://127.0.0.1:8080/creds");
  EXPECT_EQ(role->named_by, "AWS_CONTAINER_CREDENTIALS_FULL_URI");
  EXPECT_EQ(role->authorization_file, "/var/run/token");
  home.set("AWS_CONTAINER_CREDENTIALS_RELATIVE_URI", "/v2/credentials/abc");
  EXPECT_EQ(endpoint()->url, "http://169.254.170.2/v2/credentials/abc");
}

// A role's endpoint that does not answer: an instance's means no role (unsigned requests); a
// container's, named outright, is an error.
TEST(S3Settings, ARoleEndpointThatDoesNotAnswer) {
  AwsHome home;
  EXPECT_EQ(home.resolve().credentials_source, "");
  home.set("AWS_CONTAINER_CREDENTIALS_FULL_URI", "http://127.0.0.1:1/creds");
  EXPECT_NE(error_of(home).find("the container's role (AWS_CONTAINER_CREDENTIALS_FULL_URI http://127.0.0.1:1/creds) "
                                "gave no key: "),
            std::string::npos)
      << error_of(home);
}
