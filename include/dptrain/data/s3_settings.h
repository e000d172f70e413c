#pragma once
// Where s3:// names go and how their requests are signed, found the way the AWS command line finds
// them, so that a machine set up for `aws s3 ls` reads the same buckets:
//   profile      AWS_PROFILE, else AWS_DEFAULT_PROFILE, else "default"
//   credentials  AWS_ACCESS_KEY_ID + AWS_SECRET_ACCESS_KEY (+ AWS_SESSION_TOKEN); else the profile's
//                aws_access_key_id, aws_secret_access_key and aws_session_token in the shared
//                credentials file (AWS_SHARED_CREDENTIALS_FILE, else ~/.aws/credentials, sections
//                [NAME]); else the profile's credential_process (either file), a program whose
//                JSON answer gives a key and perhaps when it expires; else the keys in the config
//                file (AWS_CONFIG_FILE, else ~/.aws/config, sections [profile NAME] and [default]);
//                else the container's role (AWS_CONTAINER_CREDENTIALS_RELATIVE_URI or _FULL_URI, with
//                AWS_CONTAINER_AUTHORIZATION_TOKEN[_FILE]: ECS tasks, EKS Pod Identity); else the
//                instance's role, from its metadata service (IMDSv2, else v1; AWS_EC2_METADATA_DISABLED
//                =true skips it, AWS_EC2_METADATA_SERVICE_ENDPOINT names another, and
//                AWS_METADATA_SERVICE_TIMEOUT and _NUM_ATTEMPTS bound it: 1 s, once); else none:
//                requests go unsigned (a public bucket)
//   region       AWS_REGION, else AWS_DEFAULT_REGION, else the profile's `region`, else us-east-1
//   endpoint     AWS_ENDPOINT_URL_S3, else AWS_ENDPOINT_URL, else the profile's `endpoint_url`,
//                else AWS's own (https://s3.REGION.amazonaws.com)
// Not read: single sign-on itself (a credential_process of `aws configure export-credentials
// --profile NAME --format process` serves it), a web identity's token (EKS's IRSA: AssumeRole
// through STS), a profile's role_arn, and the config file's per-service `services` sections.
//
//   dpt::data::S3Settings s3 = dpt::data::s3_settings_from_environment();
//   dpt::data::RemoteStore store(dpt::data::RemoteOptions().s3(s3));

#include <chrono>
#include <functional>
#include <optional>
#include <string>

namespace dpt::data {

// An endpoint that hands out the key of a role this machine holds: the AWS tools' container and
// instance metadata providers.
struct RoleEndpoint {
  enum class Kind { Container, Instance };
  Kind kind = Kind::Instance;
  // Container: the credentials URL; Instance: the metadata service (http://169.254.169.254).
  std::string url;
  // The variable that named `url`, for messages (the default metadata service: none).
  std::string named_by;
  // Container: the Authorization header's value, or the file to read it from at each request
  // (EKS Pod Identity rotates it); both empty: none is sent.
  std::string authorization, authorization_file;
  // Each request's bound, and how many times one that is not answered is made.
  std::chrono::milliseconds timeout{1000};
  int attempts = 1;
};

struct S3Settings {
  // The region requests are signed for.
  std::string region = "us-east-1";
  // scheme://host[:port] of an S3-compatible store, without a trailing slash; empty: AWS's own.
  std::string endpoint;
  // No key: requests go unsigned.
  std::string access_key_id, secret_access_key, session_token;
  // Where the key came from, for messages: "AWS_ACCESS_KEY_ID", "/home/me/.aws/credentials [ci]",
  // "the credential_process of /home/me/.aws/config [profile sso]", or empty when there is none.
  std::string credentials_source;
  // The profile's credential_process when it gave the key, run again for a new one as the key's
  // expiration nears; empty otherwise.
  std::string credential_process;
  // The role's endpoint when it gave the key, asked again as the key's expiration nears.
  std::optional<RoleEndpoint> role;
  // When the key stops working (a credential process's or role's Expiration); unset: it does not.
  std::optional<std::chrono::system_clock::time_point> expiration;

  // Where requests go: `endpoint`, or AWS's for the region (https://s3.REGION.amazonaws.com).
  std::string endpoint_url() const;
  // Whether the key should be fetched anew before it signs a request at `now`: it expires within
  // kCredentialsRefreshWindow (a request in flight, its retries included, outlives its signing).
  bool key_expires_soon(std::chrono::system_clock::time_point now) const;
};

constexpr std::chrono::minutes kCredentialsRefreshWindow{10};
// A credential process asked for a key (which may prompt a sign-in elsewhere) gets this long.
constexpr std::chrono::seconds kCredentialProcessBound{120};

// An environment variable's value, or nullopt when it is unset.
using EnvironmentLookup = std::function<std::optional<std::string>(const std::string& name)>;

// The settings from `environment` and the files it leads to (HOME locates ~/.aws). ConfigError
// when a profile other than "default" is named but neither file has it, or a file that exists
// cannot be read.
S3Settings resolve_s3_settings(const EnvironmentLookup& environment);

// resolve_s3_settings over this process's environment.
S3Settings s3_settings_from_environment();

// Fetches the key anew from where it came: runs `settings.credential_process` again, or asks
// `settings.role`; takes the key and its expiration. ConfigError when the program cannot be run,
// fails, outlives kCredentialProcessBound, or answers other than with version 1 of the process
// credentials JSON ({"Version": 1, "AccessKeyId": ..., "SecretAccessKey": ..., "SessionToken":
// ..., "Expiration": "2026-12-07T10:00:00Z"}); when the role's endpoint does not answer, or not
// with a key ({"AccessKeyId": ..., "SecretAccessKey": ..., "Token": ..., "Expiration": ...}).
void refresh_credentials(S3Settings& settings);

}  // namespace dpt::data
