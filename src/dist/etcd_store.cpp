#include "dptrain/dist/etcd_store.h"

#include <curl/curl.h>
#include <nlohmann/json.hpp>

#include <cstring>
#include <thread>

#include "dptrain/common/error.h"

namespace dpt::dist {

namespace {

using Clock = std::chrono::steady_clock;
using Json = nlohmann::json;

// How often get and wait look again for a key not yet there.
constexpr std::chrono::milliseconds kPoll{10};
// The pause before asking every member again, while none answers.
constexpr std::chrono::milliseconds kUnavailablePause{200};

// The gateway's JSON carries keys and values in base64, as protobuf's JSON mapping of bytes does.
constexpr char kBase64[] = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";

std::string base64(const std::string& bytes) {
  std::string out;
  uint32_t bits = 0;
  int count = 0;
  for (unsigned char c : bytes) {
    bits = (bits << 8) | c;
    count += 8;
    while (count >= 6) {
      count -= 6;
      out += kBase64[(bits >> count) & 63];
    }
  }
  if (count > 0) out += kBase64[(bits << (6 - count)) & 63];
  while (out.size() % 4 != 0) out += '=';
  return out;
}

std::string unbase64(const std::string& text) {
  std::string out;
  uint32_t bits = 0;
  int count = 0;
  for (char c : text) {
    const char* at = std::strchr(kBase64, c);
    if (c == '=' || c == '\0' || at == nullptr) continue;
    bits = (bits << 6) | static_cast<uint32_t>(at - kBase64);
    count += 6;
    if (count >= 8) {
      count -= 8;
      out += static_cast<char>((bits >> count) & 255);
    }
  }
  return out;
}

std::string as_text(const std::vector<uint8_t>& bytes) { return std::string(bytes.begin(), bytes.end()); }
std::vector<uint8_t> as_bytes(const std::string& text) { return std::vector<uint8_t>(text.begin(), text.end()); }

// The gateway writes int64 fields as strings, and leaves out fields at their default (0, false, "").
int64_t int_field(const Json& object, const char* name) {
  const auto it = object.find(name);
  if (it == object.end()) return 0;
  return it->is_string() ? std::stoll(it->get<std::string>()) : it->get<int64_t>();
}

// A key's value and revision, as a range read it.
struct Entry {
  bool present = false;
  std::string value;
  int64_t mod_revision = 0;
};

Entry entry_of(const Json& range) {
  Entry entry;
  const auto kvs = range.find("kvs");
  if (kvs == range.end() || kvs->empty()) return entry;
  const Json& kv = kvs->at(0);
  entry.present = true;
  entry.value = unbase64(kv.value("value", ""));
  entry.mod_revision = int_field(kv, "mod_revision");
  return entry;
}

size_t append_body(char* data, size_t size, size_t count, void* body) {
  static_cast<std::string*>(body)->append(data, size * count);
  return size * count;
}

std::string base_url(std::string endpoint) {
  while (!endpoint.empty() && endpoint.back() == '/') endpoint.pop_back();
  return endpoint.find("://") == std::string::npos ? "http://" + endpoint : endpoint;
}

}  // namespace

// POSTs to the gateway: one libcurl handle, its connection kept alive, to the member that answered
// last, passing to the next on a failure.
class EtcdStore::Client {
 public:
  explicit Client(const EtcdStoreOptions& options) : options_(options) {
    // Thread-safe since libcurl 7.84 (Debian 12 has 7.88), and a no-op after the first call.
    DPT_CHECK(curl_global_init(CURL_GLOBAL_DEFAULT) == CURLE_OK, DistError, "libcurl could not be initialised");
    handle_ = curl_easy_init();
    DPT_CHECK(handle_ != nullptr, DistError, "libcurl could not make a handle");
    DPT_CHECK(!options_.endpoints().empty(), ConfigError, "an etcd store needs at least one endpoint");
  }
  ~Client() { curl_easy_cleanup(handle_); }
  Client(const Client&) = delete;
  Client& operator=(const Client&) = delete;

  // The gateway's answer to `body` at `path` ("/v3/kv/range"); DistError when no member answered
  // within unavailable_for.
  Json call(const std::string& path, const Json& body) {
    const std::string payload = body.dump();
    const auto give_up = Clock::now() + options_.unavailable_for();
    std::vector<std::string> said(options_.endpoints().size());
    while (true) {
      for (size_t tried = 0; tried < options_.endpoints().size(); ++tried) {
        const size_t member = (preferred_ + tried) % options_.endpoints().size();
        std::string answer;
        if (post(base_url(options_.endpoints()[member]) + path, payload, answer, said[member])) {
          preferred_ = member;
          return Json::parse(answer);
        }
      }
      if (Clock::now() >= give_up) break;
      std::this_thread::sleep_for(kUnavailablePause);
    }
    std::string members;
    for (size_t i = 0; i < said.size(); ++i) {
      members += str(members.empty() ? "" : "; ", options_.endpoints()[i], ": ", said[i]);
    }
    throw DistError(str("the etcd cluster that holds the job's store did not answer for ",
                        std::chrono::duration<double>(options_.unavailable_for()).count(), " s (", members,
                        "). A majority of its members must be up and reach one another; check them with ",
                        "etcdctl endpoint health"));
  }

 private:
  // One request; false (with `why`) when this member cannot answer it now.
  bool post(const std::string& url, const std::string& payload, std::string& answer, std::string& why) {
    char error[CURL_ERROR_SIZE] = {0};
    curl_easy_reset(handle_);
    std::unique_ptr<curl_slist, decltype(&curl_slist_free_all)> headers(
        curl_slist_append(nullptr, "Content-Type: application/json"), curl_slist_free_all);
    curl_easy_setopt(handle_, CURLOPT_URL, url.c_str());
    curl_easy_setopt(handle_, CURLOPT_POSTFIELDS, payload.c_str());
    curl_easy_setopt(handle_, CURLOPT_POSTFIELDSIZE, static_cast<long>(payload.size()));
    curl_easy_setopt(handle_, CURLOPT_HTTPHEADER, headers.get());
    curl_easy_setopt(handle_, CURLOPT_NOSIGNAL, 1L);  // other threads: no SIGALRM for name lookups
    curl_easy_setopt(handle_, CURLOPT_TIMEOUT_MS, static_cast<long>(options_.request_timeout().count()));
    curl_easy_setopt(handle_, CURLOPT_ERRORBUFFER, error);
    curl_easy_setopt(handle_, CURLOPT_WRITEFUNCTION, append_body);
    curl_easy_setopt(handle_, CURLOPT_WRITEDATA, &answer);
    const CURLcode code = curl_easy_perform(handle_);
    long status = 0;
    curl_easy_getinfo(handle_, CURLINFO_RESPONSE_CODE, &status);
    if (code != CURLE_OK) {
      why = error[0] != '\0' ? error : curl_easy_strerror(code);
      return false;
    }
    // A member without a leader (cut off, or electing one) answers 5xx: another may have one.
    if (status != 200) {
      why = str("HTTP ", status, ": ", answer.substr(0, 200));
      return false;
    }
    return true;
  }

  const EtcdStoreOptions& options_;
  CURL* handle_ = nullptr;
  size_t preferred_ = 0;
};

EtcdStore::EtcdStore(EtcdStoreOptions options)
    : c10d::Store(options.timeout()), options_(std::move(options)), client_(std::make_unique<Client>(options_)) {
  std::lock_guard<std::mutex> lock(mutex_);
  client_->call("/v3/kv/range", Json{{"key", base64(options_.prefix())}, {"count_only", true}});
}

EtcdStore::~EtcdStore() = default;

void EtcdStore::set(const std::string& key, const std::vector<uint8_t>& value) {
  std::lock_guard<std::mutex> lock(mutex_);
  client_->call("/v3/kv/put", Json{{"key", base64(options_.prefix() + key)}, {"value", base64(as_text(value))}});
}

std::vector<uint8_t> EtcdStore::compareSet(const std::string& key, const std::vector<uint8_t>& expected,
                                           const std::vector<uint8_t>& desired) {
  const std::string name = base64(options_.prefix() + key);
  // As TCPStore: an absent key is set only when nothing was expected; a present one only when it
  // holds what was expected. Either way the answer is the value the key holds afterwards (or, absent
  // and not set, the expected value).
  const Json compare = expected.empty()
                           ? Json{{"key", name}, {"target", "CREATE"}, {"result", "EQUAL"}, {"create_revision", "0"}}
                           : Json{{"key", name}, {"target", "VALUE"}, {"result", "EQUAL"},
                                  {"value", base64(as_text(expected))}};
  Json answer;
  {
    std::lock_guard<std::mutex> lock(mutex_);
    answer = client_->call(
        "/v3/kv/txn", Json{{"compare", Json::array({compare})},
                           {"success", Json::array({Json{{"request_put", {{"key", name}, {"value", base64(as_text(desired))}}}}})},
                           {"failure", Json::array({Json{{"request_range", {{"key", name}}}}})}});
  }
  if (answer.value("succeeded", false)) return desired;
  const Entry now = entry_of(answer.at("responses").at(0).at("response_range"));
  return now.present ? as_bytes(now.value) : expected;
}

std::vector<uint8_t> EtcdStore::get(const std::string& key) {
  wait({key});
  std::lock_guard<std::mutex> lock(mutex_);
  return as_bytes(entry_of(client_->call("/v3/kv/range", Json{{"key", base64(options_.prefix() + key)}})).value);
}

int64_t EtcdStore::add(const std::string& key, int64_t value) {
  const std::string name = base64(options_.prefix() + key);
  std::lock_guard<std::mutex> lock(mutex_);
  // Read, then write only if nobody wrote between: a conflict reads again.
  while (true) {
    const Entry now = entry_of(client_->call("/v3/kv/range", Json{{"key", name}}));
    const int64_t sum = (now.present ? std::stoll(now.value) : 0) + value;
    const Json compare = now.present ? Json{{"key", name}, {"target", "MOD"}, {"result", "EQUAL"},
                                            {"mod_revision", std::to_string(now.mod_revision)}}
                                     : Json{{"key", name}, {"target", "CREATE"}, {"result", "EQUAL"},
                                            {"create_revision", "0"}};
    const Json answer = client_->call(
        "/v3/kv/txn",
        Json{{"compare", Json::array({compare})},
             {"success", Json::array({Json{{"request_put", {{"key", name}, {"value", base64(std::to_string(sum))}}}}})}});
    if (answer.value("succeeded", false)) return sum;
  }
}

bool EtcdStore::deleteKey(const std::string& key) {
  std::lock_guard<std::mutex> lock(mutex_);
  return int_field(client_->call("/v3/kv/deleterange", Json{{"key", base64(options_.prefix() + key)}}), "deleted") > 0;
}

bool EtcdStore::check(const std::vector<std::string>& keys) {
  std::lock_guard<std::mutex> lock(mutex_);
  for (const auto& key : keys) {
    const Json answer =
        client_->call("/v3/kv/range", Json{{"key", base64(options_.prefix() + key)}, {"count_only", true}});
    if (int_field(answer, "count") == 0) return false;
  }
  return true;
}

int64_t EtcdStore::getNumKeys() {
  // Every key under the prefix: the range [prefix, prefix with its last byte incremented).
  std::string end = options_.prefix();
  DPT_CHECK(!end.empty() && static_cast<unsigned char>(end.back()) != 0xff, ConfigError,
            "an etcd store's prefix must be non-empty and end below byte 0xff");
  end.back() = static_cast<char>(end.back() + 1);
  std::lock_guard<std::mutex> lock(mutex_);
  return int_field(client_->call("/v3/kv/range", Json{{"key", base64(options_.prefix())},
                                                      {"range_end", base64(end)},
                                                      {"count_only", true}}),
                   "count");
}

void EtcdStore::wait(const std::vector<std::string>& keys) { wait(keys, timeout_); }

void EtcdStore::wait(const std::vector<std::string>& keys, const std::chrono::milliseconds& timeout) {
  const auto deadline = Clock::now() + timeout;
  while (!check(keys)) {
    if (Clock::now() >= deadline) {
      std::string names;
      for (const auto& key : keys) names += str(names.empty() ? "" : ", ", key);
      throw TimeoutError(str("waited ", std::chrono::duration<double>(timeout).count(), " s in the etcd store ",
                             options_.prefix(), " for ", names));
    }
    std::this_thread::sleep_for(kPoll);
  }
}

}  // namespace dpt::dist
