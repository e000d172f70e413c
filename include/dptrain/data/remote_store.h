#pragma once
// Files of a dataset kept on a web server or in an S3-compatible bucket, fetched through libcurl:
//   http://host/path, https://host/path   plain GETs (a server that needs no signature)
//   s3://bucket/key                       AWS Signature V4 (libcurl's), path-style addressing
// named and configured the way the AWS tools are: AWS_ACCESS_KEY_ID, AWS_SECRET_ACCESS_KEY,
// AWS_SESSION_TOKEN, AWS_REGION (or AWS_DEFAULT_REGION; default us-east-1) and the endpoint of an
// S3-compatible store in AWS_ENDPOINT_URL_S3 or AWS_ENDPOINT_URL (default AWS's own).
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
#include <optional>
#include <string>

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

 private:
  RemoteOptions options_;
};

}  // namespace dpt::data
