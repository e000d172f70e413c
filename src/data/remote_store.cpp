#include "dptrain/data/remote_store.h"

#include <curl/curl.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <functional>
#include <memory>
#include <thread>

#include "dptrain/common/error.h"
#include "dptrain/common/text.h"
#include "curl_ready.h"

namespace dpt::data {

void ensure_curl() {
  // A function-local static is initialised once, whichever threads ask at once.
  static const bool ready = curl_global_init(CURL_GLOBAL_DEFAULT) == CURLE_OK;
  DPT_CHECK(ready, DataError, "libcurl could not be initialised");
}

namespace {

// SHA-256 of no bytes.
constexpr const char* kEmptyPayloadSha256 = "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855";

// What one remote name asks of libcurl: the HTTP URL, and for S3 the signing.
struct Request {
  std::string name;  // as the user wrote it, for messages
  std::string url;
  bool s3 = false;
  std::string region, user_password, session_token, credentials_source;
};

Request request_for(const std::string& name, const RemoteStore& store) {
  Request request;
  request.name = request.url = name;
  if (!starts_with(name, "s3://")) return request;
  request.s3 = true;
  const std::string path = name.substr(5);
  const size_t slash = path.find('/');
  DPT_CHECK(slash != std::string::npos && slash > 0 && slash + 1 < path.size(), ConfigError, "'", name,
            "' is not an s3://BUCKET/KEY name");
  const S3Settings settings = store.s3();
  request.region = settings.region;
  request.url = settings.endpoint_url() + "/" + path;  // path-style: every S3-compatible store takes it
  if (!settings.access_key_id.empty()) {  // else unsigned, as for a public bucket
    request.user_password = settings.access_key_id + ":" + settings.secret_access_key;
  }
  request.session_token = settings.session_token;
  request.credentials_source = settings.credentials_source;
  return request;
}

struct Attempt {
  CURLcode code = CURLE_OK;
  long status = 0;
  std::string error;  // libcurl's words for a failed transfer
};

// One GET of `request`, its body handed to `sink` as it comes.
using BodySink = std::function<void(const char*, size_t)>;

// This thread's libcurl handle, its options reset for each transfer. It keeps its connections
// open between transfers: a fetch after the first to the same server skips TCP's handshake and
// its slow start (bench/remote_shards, 1 Gbit/s with 5 ms round trips, one fetch at a time: 72%
// of the link with a new connection per 8 MiB shard, 89% with the connection kept). A transfer
// leaves it reset: nothing it keeps points into a transfer's stack frame.
CURL* thread_handle(const Request& request) {
  ensure_curl();
  thread_local std::unique_ptr<CURL, void (*)(CURL*)> handle(curl_easy_init(), curl_easy_cleanup);
  DPT_CHECK(handle != nullptr, DataError, "libcurl could not start a transfer for ", request.name);
  return handle.get();
}

Attempt attempt(const Request& request, const RemoteOptions& options, const BodySink& sink) {
  CURL* h = thread_handle(request);
  std::unique_ptr<curl_slist, void (*)(curl_slist*)> headers(nullptr, curl_slist_free_all);
  char error[CURL_ERROR_SIZE] = "";
  auto write = +[](char* data, size_t size, size_t count, void* user) -> size_t {
    (*static_cast<const BodySink*>(user))(data, size * count);
    return size * count;
  };
  curl_easy_setopt(h, CURLOPT_URL, request.url.c_str());
  curl_easy_setopt(h, CURLOPT_FOLLOWLOCATION, 1L);
  curl_easy_setopt(h, CURLOPT_NOSIGNAL, 1L);  // loader threads: no SIGALRM for name lookups
  curl_easy_setopt(h, CURLOPT_ERRORBUFFER, error);
  curl_easy_setopt(h, CURLOPT_CONNECTTIMEOUT_MS, static_cast<long>(options.connect_timeout().count() * 1000));
  curl_easy_setopt(h, CURLOPT_LOW_SPEED_LIMIT, 1024L);
  curl_easy_setopt(h, CURLOPT_LOW_SPEED_TIME, static_cast<long>(options.stall_timeout().count()));
  curl_easy_setopt(h, CURLOPT_WRITEFUNCTION, write);
  curl_easy_setopt(h, CURLOPT_WRITEDATA, const_cast<BodySink*>(&sink));
  const std::string sigv4 = "aws:amz:" + request.region + ":s3";
  if (request.s3 && !request.user_password.empty()) {
    curl_easy_setopt(h, CURLOPT_AWS_SIGV4, sigv4.c_str());
    curl_easy_setopt(h, CURLOPT_USERPWD, request.user_password.c_str());
    // S3 wants the payload's hash in a header of its own (libcurl signs it with the others): a
    // GET's payload is empty.
    const std::string payload_hash = std::string("x-amz-content-sha256: ") + kEmptyPayloadSha256;
    curl_slist* list = curl_slist_append(nullptr, payload_hash.c_str());
    if (!request.session_token.empty()) {
      list = curl_slist_append(list, ("x-amz-security-token: " + request.session_token).c_str());
    }
    headers.reset(list);
    curl_easy_setopt(h, CURLOPT_HTTPHEADER, headers.get());
  }
  Attempt result;
  result.code = curl_easy_perform(h);
  curl_easy_getinfo(h, CURLINFO_RESPONSE_CODE, &result.status);
  result.error = error[0] != '\0' ? error : curl_easy_strerror(result.code);
  curl_easy_reset(h);
  return result;
}

// Failures that may pass on their own: the network's and the server's load.
bool may_pass(const Attempt& a) {
  if (a.code == CURLE_OK) return a.status == 429 || a.status >= 500;
  switch (a.code) {
    case CURLE_COULDNT_CONNECT:
    case CURLE_COULDNT_RESOLVE_HOST:
    case CURLE_OPERATION_TIMEDOUT:
    case CURLE_RECV_ERROR:
    case CURLE_SEND_ERROR:
    case CURLE_GOT_NOTHING:
    case CURLE_PARTIAL_FILE:
    case CURLE_HTTP2:
    case CURLE_HTTP2_STREAM:
      return true;
    default:
      return false;
  }
}

std::string advice(const Request& request, const Attempt& a) {
  if (a.code != CURLE_OK) return "check that the server is up and this machine reaches it";
  if (a.status == 403 || a.status == 401) {
    if (!request.s3) return "the server refused this request: check the URL's permissions";
    return str("the store refused this request: check the credentials (",
               request.credentials_source.empty()
                   ? "none were found, so it went unsigned: set AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY, or "
                     "AWS_PROFILE"
                   : "from " + request.credentials_source,
               "), the region (", request.region, ") and the bucket's permissions");
  }
  if (a.status == 404) return "nothing is there: check the name (a manifest names its shards relative to itself)";
  return "the server failed; try again later or ask its operator";
}

std::string what_happened(const Attempt& a) {
  return a.code == CURLE_OK ? "HTTP " + std::to_string(a.status) : a.error;
}

enum class Outcome { Fetched, Missing };

// Fetches with retries; `restart` empties what a failed attempt left in the sink.
Outcome fetch(const Request& request, const RemoteOptions& options, bool missing_is_fine, const BodySink& sink,
              const std::function<void()>& restart) {
  auto wait = options.first_backoff();
  for (int tries = 1;; ++tries) {
    const Attempt a = attempt(request, options, sink);
    if (a.code == CURLE_OK && a.status / 100 == 2) return Outcome::Fetched;
    if (missing_is_fine && a.code == CURLE_OK && a.status == 404) return Outcome::Missing;
    if (!may_pass(a) || tries > options.retries()) {
      throw DataError(str("cannot fetch ", request.name, ": ", what_happened(a),
                          tries > 1 ? str(" after ", tries, " attempts") : std::string(), "; ", advice(request, a)));
    }
    std::this_thread::sleep_for(wait);
    wait *= 2;
    restart();
  }
}

}  // namespace

bool is_remote(const std::string& spec) {
  return starts_with(spec, "http://") || starts_with(spec, "https://") || starts_with(spec, "s3://");
}

RemoteStore::RemoteStore(RemoteOptions options) : options_(std::move(options)) {
  DPT_CHECK(options_.retries() >= 0, ConfigError, "remote fetch retries must not be negative, got ",
            options_.retries());
}

S3Settings RemoteStore::s3() const {
  if (options_.s3()) return *options_.s3();
  // A call that throws leaves nothing found (or the old key): the next one tries again.
  std::lock_guard<std::mutex> lock(s3_mutex_);
  if (!found_s3_) {
    found_s3_ = s3_settings_from_environment();
  } else if (found_s3_->key_expires_soon(std::chrono::system_clock::now())) {
    refresh_credentials(*found_s3_);
  }
  return *found_s3_;
}

std::optional<std::string> RemoteStore::fetch_text_if_present(const std::string& url) const {
  std::string body;
  const auto outcome = fetch(request_for(url, *this), options_, /*missing_is_fine=*/true,
                             [&](const char* data, size_t size) { body.append(data, size); }, [&] { body.clear(); });
  if (outcome == Outcome::Missing) return std::nullopt;
  return body;
}

std::string RemoteStore::fetch_text(const std::string& url) const {
  std::string body;
  fetch(request_for(url, *this), options_, /*missing_is_fine=*/false,
        [&](const char* data, size_t size) { body.append(data, size); }, [&] { body.clear(); });
  return body;
}

int64_t RemoteStore::fetch_to_file(const std::string& url, const std::string& path) const {
  // Unique per process and fetch: a folder may be shared by the processes of a machine.
  static std::atomic<int64_t> fetches{0};
  const std::string part = path + ".part." + std::to_string(::getpid()) + "." + std::to_string(fetches++);
  std::unique_ptr<FILE, int (*)(FILE*)> file(std::fopen(part.c_str(), "wb"), std::fclose);
  DPT_CHECK(file != nullptr, DataError, "cannot write ", part, " (fetching ", url, "): ", std::strerror(errno));
  int64_t written = 0;
  bool failed = false;
  try {
    fetch(
        request_for(url, *this), options_, /*missing_is_fine=*/false,
        [&](const char* data, size_t size) {
          failed |= std::fwrite(data, 1, size, file.get()) != size;
          written += static_cast<int64_t>(size);
        },
        [&] {
          std::rewind(file.get());
          failed |= ::ftruncate(::fileno(file.get()), 0) != 0;
          written = 0;
        });
    failed |= std::fflush(file.get()) != 0;
    DPT_CHECK(!failed, DataError, "cannot write ", part, " (fetching ", url, "): ", std::strerror(errno),
              "; free space in the cache folder or give another");
    file.reset();
    std::filesystem::rename(part, path);
  } catch (...) {
    file.reset();
    std::error_code ignored;
    std::filesystem::remove(part, ignored);
    throw;
  }
  return written;
}

}  // namespace dpt::data
