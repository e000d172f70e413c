#pragma once
// Admission: a job's token checked before a process joins anything of the job's (its rank
// rendezvous, an elastic round), with a clear refusal on both sides.
//
//   // the store's host (rank 0, the elastic host), once it serves the store:
//   auto admission = dpt::dist::Admission::open(*store, "rank 0", AdmissionOptions("dpt/", timeout).token(token));
//   for (const auto& line : admission.take_refusals(*store)) log(line);   // while others join
//   // everyone else, before taking a place:
//   auto admission = dpt::dist::Admission::enter(*store, "rank 3", AdmissionOptions("dpt/", timeout).token(token));
//   store->set("dpt/proof/3", admission.proof("rank 3"));                  // beside the claimed place
//
// LibTorch's store and Gloo accept whoever connects. The token (DPTRAIN_JOB_TOKEN: `dptrain launch`
// makes one for a job on one host and passes it to its workers; --job-token FILE for several
// nodes) keeps out a process of another job pointed at this job's port by mistake, and a stranger
// who does not know it. The token never crosses the network: the host publishes a fresh random
// nonce and HMAC-SHA-256(token, nonce|"host"); a joiner computes the same with its own token, and
// when they differ (or only one side has a token) it stops before touching the job's keys, after
// leaving a line that the host logs. An admitted process proves, beside the place it takes,
// HMAC(token, nonce|place), which every member checks, so a process that skipped this check
// cannot take a rank unnoticed. What stays open: whoever reaches the store can still read and
// delete keys, i.e. stop the job (docs/security.md).

#include <chrono>
#include <optional>
#include <string>
#include <vector>

#include <torch/arg.h>

#include "dptrain/compat/compat.h"

namespace dpt::dist {

struct AdmissionOptions {
  AdmissionOptions(std::string prefix, std::chrono::milliseconds timeout)
      : prefix_(std::move(prefix)), timeout_(timeout) {}
  // The store keys' prefix ("<prefix>admission/..."): one admission per rendezvous on a store.
  TORCH_ARG(std::string, prefix);
  // How long a joiner waits for the host to publish its nonce.
  TORCH_ARG(std::chrono::milliseconds, timeout);
  // The job's secret; unset: the job runs without one, and admits only processes without one.
  TORCH_ARG(std::optional<std::string>, token) = std::nullopt;
  // Where the job meets ("10.0.0.1:29500"), for messages.
  TORCH_ARG(std::string, address) = "";
};

class Admission {
 public:
  // The host's side: publishes a fresh nonce and the proof of its token (or that it has none). A
  // second process that takes itself for the host (two rank 0s on one file store) enters instead,
  // as `who`, and finds out from what it claims next.
  static Admission open(c10d::Store& store, const std::string& who, AdmissionOptions options);
  // A joiner's side, `who` naming it in messages ("rank 3", "node on host-b"): waits within the
  // timeout for the host's nonce and checks that both hold the same token, or both none. Refused,
  // it leaves a line for the host's log and throws DistError saying what to do.
  static Admission enter(c10d::Store& store, const std::string& who, AdmissionOptions options);

  // Whether a host has opened the admission under `prefix` (a joiner that would rather report its
  // wait than block in enter() polls this first).
  static bool is_open(c10d::Store& store, const std::string& prefix);

  bool has_token() const { return options_.token().has_value(); }
  // The proof that whoever took `place` holds the token; empty when the job has none.
  std::string proof(const std::string& place) const;
  // Whether `proof` is the one for `place` (any proof passes in a job without a token).
  bool verify(const std::string& place, const std::string& proof) const;
  // The host's side: one line for each process refused since the last call.
  std::vector<std::string> take_refusals(c10d::Store& store);

 private:
  Admission(AdmissionOptions options, std::string nonce) : options_(std::move(options)), nonce_(std::move(nonce)) {}
  std::string key(const std::string& name) const { return options_.prefix() + "admission/" + name; }

  AdmissionOptions options_;
  std::string nonce_;
  int64_t refusals_seen_ = 0;
};

}  // namespace dpt::dist
