#pragma once
// Files of a dataset kept on a web server or in an S3-compatible bucket, fetched through libcurl:
//   http://host/path, https://host/path   plain GETs (a server that needs no signature)
//   s3://bucket/key                       AWS Signature V4 (libcurl's), path-style addressing
// with the credentials, region and endpoint the AWS tools would use (s3_settings.h: environment
// variables, then the profile in ~/.aws/credentials and ~/.aws/config).
//
// Every fetch is bounded: a connect timeout, a transfer that stalls (below 1 KB/s for the stall
// time) fails, and failures that may pass (a connection refused or reset, a timeout, HTTP 429 and
// 5xx) are retried with doubling waits, then reported with the URL, the last status and what to
// do. HTTP 403 and 404 are not retried.
//
//   dpt::data::RemoteStore store(dpt::data::RemoteOptions().retries(4));
//   std::string manifest = store.fetch_text("s3://imagenet/train/manifest.json");
//   store.fetch_to_file("s3://imagenet/train/train-000000.tar", "/cache/train-000000.tar");

#include <torch/arg.h>

#include <chrono>
#include <mutex>
#include <optional>
#include <string>

#include "dptrain/data/s3_settings.h"

namespace dpt::data {

// Whether `spec` names a remote location (http://, https:// or s3://).
bool is_remote(const std::string& spec);

struct RemoteOptions {
  // Attempts after the first for a failure that may pass.
  TORCH_ARG(int, retries) = 5;
  // The wait before the first retry; each next one waits twice as long.
  TORCH_ARG(std::chrono::milliseconds, first_backoff) = std::chrono::milliseconds(250);
  TORCH_ARG(std::chrono::seconds, connect_timeout) = std::chrono::seconds(10);
  // A transfer that moves less than 1 KB/s for this long is a failure (and retried).
  TORCH_ARG(std::chrono::seconds, stall_timeout) = std::chrono::seconds(30);
  // Where s3:// names go and how they are signed; unset: found as the AWS tools find them
  // (s3_settings_from_environment) at the store's first s3:// request.
  TORCH_ARG(std::optional<S3Settings>, s3);
};

class RemoteStore {
 public:
  explicit RemoteStore(RemoteOptions options = {});

  // The whole body of `url`. DataError naming the URL when it cannot be fetched.
  std::string fetch_text(const std::string& url) const;
  // The body, or nullopt when the server answers 404 (an optional file, such as a shard's index).
  std::optional<std::string> fetch_text_if_present(const std::string& url) const;
  // Writes the body to `path` atomically (a temporary file beside it, renamed when whole).
  // Returns the bytes written.
  int64_t fetch_to_file(const std::string& url, const std::string& path) const;

  const RemoteOptions& options() const { return options_; }
  // Where s3:// names go and how they are signed, found at the first call: a set on disk or over
  // HTTP reads no AWS file. A key from a credential process is fetched anew as it nears its
  // expiration, so a job outlives its keys. Throws the ConfigError that finding them meets (an
  // AWS profile named but missing, a credential process that fails), at every call.
  S3Settings s3() const;

 private:
  RemoteOptions options_;
  // The settings found, and renewed, for options_.s3() unset; the fetch threads ask at once.
  mutable std::mutex s3_mutex_;
  mutable std::optional<S3Settings> found_s3_;
};

}  // namespace dpt::data
