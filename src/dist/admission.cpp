#include "dptrain/dist/admission.h"

#include <thread>

#include "dptrain/common/error.h"
#include "dptrain/common/job_token.h"
#include "dptrain/common/sha256.h"
#include "dptrain/dist/store_text.h"

namespace dpt::dist {

namespace {

using Clock = std::chrono::steady_clock;

// What the host publishes in place of a proof when the job has no token.
constexpr const char* kNoToken = "none";

std::string tag(const std::string& token, const std::string& nonce, const std::string& place) {
  return hex(hmac_sha256(token, nonce + "|" + place));
}

std::string host_proof(const std::optional<std::string>& token, const std::string& nonce) {
  return token ? tag(*token, nonce, "host") : kNoToken;
}

// Why a joiner and the host do not match, for both sides' messages; empty when they do.
std::string mismatch(const std::optional<std::string>& mine, const std::string& published, const std::string& nonce) {
  const bool host_has_token = published != kNoToken;
  if (!mine && host_has_token) return "the job requires a job token and this process has none";
  if (mine && !host_has_token) return "the job runs without a job token and this process has one";
  if (mine && !equal_in_constant_time(host_proof(mine, nonce), published)) {
    return "this process holds a different job token";
  }
  return "";
}

}  // namespace

Admission Admission::open(c10d::Store& store, const std::string& who, AdmissionOptions options) {
  Admission admission(std::move(options), make_job_token());
  if (store.add(admission.key("hosts"), 1) > 1) return enter(store, who, admission.options_);
  write_text(store, admission.key("nonce"), admission.nonce_);
  // Last: joiners wait for this key, so the nonce is there when they see it.
  write_text(store, admission.key("host"), host_proof(admission.options_.token(), admission.nonce_));
  return admission;
}

Admission Admission::enter(c10d::Store& store, const std::string& who, AdmissionOptions options) {
  const std::string where = options.address().empty() ? std::string() : " at " + options.address();
  Admission admission(options, "");
  const auto deadline = Clock::now() + options.timeout();
  while (!is_open(store, options.prefix())) {
    DPT_CHECK(Clock::now() < deadline, TimeoutError, who, ": the job", where,
              " serves its store but did not publish its admission within ",
              static_cast<double>(options.timeout().count()) / 1000.0,
              " s: the process there may not be a dptrain job of this version");
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  }
  const std::string published = read_text(store, admission.key("host"));
  admission.nonce_ = read_text(store, admission.key("nonce"));
  const std::string why = mismatch(options.token(), published, admission.nonce_);
  if (!why.empty()) {
    const int64_t number = store.add(admission.key("refused"), 1);
    write_text(store, admission.key(str("refused/", number)), str(who, ": ", why));
    throw DistError(str(who, ": not admitted to the job", where, ": ", why,
                        ". A job's processes share one token (DPTRAIN_JOB_TOKEN; `dptrain launch` makes one for "
                        "a job on one host and passes it to its workers, --job-token FILE gives every node the "
                        "same). Check that this process was pointed at its own job's address and port."));
  }
  return admission;
}

bool Admission::is_open(c10d::Store& store, const std::string& prefix) {
  return store.check({prefix + "admission/host"});
}

std::string Admission::proof(const std::string& place) const {
  return options_.token() ? tag(*options_.token(), nonce_, place) : std::string();
}

bool Admission::verify(const std::string& place, const std::string& given) const {
  return !options_.token() || equal_in_constant_time(proof(place), given);
}

std::vector<std::string> Admission::take_refusals(c10d::Store& store) {
  std::vector<std::string> lines;
  const int64_t refused = store.add(key("refused"), 0);
  for (; refusals_seen_ < refused; ++refusals_seen_) {
    const std::string entry = key(str("refused/", refusals_seen_ + 1));
    // The refused process counts first and writes its line next: a line not there yet comes on
    // the next call.
    if (!store.check({entry})) break;
    lines.push_back(str("refused a process that tried to join", options_.address().empty() ? "" : " " +
                        options_.address(), " (", read_text(store, entry), "); the job goes on"));
  }
  return lines;
}

}  // namespace dpt::dist
