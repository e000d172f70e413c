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
//                else none: requests go unsigned (a public bucket)
//   region       AWS_REGION, else AWS_DEFAULT_REGION, else the profile's `region`, else us-east-1
//   endpoint     AWS_ENDPOINT_URL_S3, else AWS_ENDPOINT_URL, else the profile's `endpoint_url`,
//                else AWS's own (https://s3.REGION.amazonaws.com)
// Not read: single sign-on itself (a credential_process of `aws configure export-credentials
// --profile NAME --format process` serves it), instance and container roles, and the config file's
// per-service `services` sections.
//
//   dpt::data::S3Settings s3 = dpt::data::s3_settings_from_environment();
//   dpt::data::RemoteStore store(dpt::data::RemoteOptions().s3(s3));

#include <chrono>
#include <functional>
#include <optional>
#include <string>

namespace dpt::data {

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
  // When the key stops working (a credential process's Expiration); unset: it does not.
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

// Runs `settings.credential_process` again and takes its key and expiration. ConfigError when the
// program cannot be run, fails, outlives kCredentialProcessBound, or answers other than with
// version 1 of the process credentials JSON ({"Version": 1, "AccessKeyId": ..., "SecretAccessKey":
// ..., "SessionToken": ..., "Expiration": "2026-12-07T10:00:00Z"}).
void refresh_credentials(S3Settings& settings);

}  // namespace dpt::data
