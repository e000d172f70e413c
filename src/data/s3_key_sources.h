#pragma once
// Where an S3 key comes from when it is not written down (s3_settings.h): a profile's credential
// process, a container's role or an instance's role, each handing it over as JSON, perhaps with
// an expiration. Private to the data layer.

#include <nlohmann/json.hpp>

#include <optional>
#include <string>

#include "dptrain/data/s3_settings.h"

namespace dpt::data {

// Runs `settings.credential_process` and takes its key (s3_credential_process.cpp).
void take_credential_process_key(S3Settings& settings);

// The endpoint of this container's role (AWS_CONTAINER_CREDENTIALS_RELATIVE_URI or _FULL_URI),
// else of this instance's (its metadata service, unless AWS_EC2_METADATA_DISABLED is true).
// ConfigError for a malformed setting (s3_role_credentials.cpp).
std::optional<RoleEndpoint> role_endpoint_from(const EnvironmentLookup& environment);

// Asks `settings.role` for its key and takes it, naming it in credentials_source. False when an
// instance's metadata service does not answer or the instance has no role: the key is left as it
// was. ConfigError for a container's endpoint that does not answer, and for an answer that is not
// a key.
bool take_role_key(S3Settings& settings);

// `body` as a JSON object. ConfigError naming `what` ("the credential_process of ...") otherwise.
nlohmann::json parse_key_answer(const std::string& body, const std::string& what);

// Takes AccessKeyId, SecretAccessKey (both required), the session token from `token_field` (a
// credential process says SessionToken, a role's endpoint Token) and Expiration (RFC 3339 UTC)
// into `settings`. Every field is read and checked before any is taken: an answer refused halfway
// leaves the old key whole, with its expiration, so that the next request asks again.
void take_key(S3Settings& settings, const nlohmann::json& answer, const char* token_field, const std::string& what);

}  // namespace dpt::data
