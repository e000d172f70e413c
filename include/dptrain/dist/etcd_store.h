#pragma once
// A c10d store kept in an etcd cluster, so that a job's rendezvous outlives any one machine: the
// workers' store of `dptrain launch --rdzv-backend etcd --rdzv-endpoint H1:P1,H2:P2,H3:P3` (as
// torchrun's etcd backend keeps its rendezvous there), instead of a TCPStore served by node 0.
//
//   auto store = c10::make_intrusive<dpt::dist::EtcdStore>(
//       dpt::dist::EtcdStoreOptions({"10.0.0.1:2379", "10.0.0.2:2379", "10.0.0.3:2379"}, "/dptrain/run1/"));
//   store->set("ready", {'1'});
//   store->add("count", 1);  // atomic across every process of the job
//
// It speaks etcd's v3 HTTP/JSON gateway (etcd 3.4 and 3.5: Debian 12's and 13's etcd-server)
// through libcurl, one kept-alive connection per store. A request goes to the member that answered
// last; one that does not answer (down, or cut off from the cluster's majority) is passed over for
// the next, so the store works while a majority of the members does. The semantics are TCPStore's:
// get and wait block until the keys exist, within the timeout; add is atomic (a transaction on the
// key's revision, retried when another process changed it first); compareSet is one transaction.
// Every key lives under `prefix`, which the job's run id makes its own.

#include <chrono>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include <torch/arg.h>

#include "dptrain/compat/compat.h"

namespace dpt::dist {

struct EtcdStoreOptions {
  EtcdStoreOptions(std::vector<std::string> endpoints, std::string prefix)
      : endpoints_(std::move(endpoints)), prefix_(std::move(prefix)) {}
  // The cluster's client URLs: host:port or http://host:port.
  TORCH_ARG(std::vector<std::string>, endpoints);
  // Every key of this store lives under it ("/dptrain/<run id>/").
  TORCH_ARG(std::string, prefix);
  // Bound on get and wait (the store's timeout).
  TORCH_ARG(std::chrono::milliseconds, timeout) = std::chrono::minutes(5);
  // Bound on one request to one member: past it, the next member is asked.
  TORCH_ARG(std::chrono::milliseconds, request_timeout) = std::chrono::seconds(3);
  // How long every member may fail to answer before a request fails (a leader election takes a
  // second or two after a member is lost).
  TORCH_ARG(std::chrono::milliseconds, unavailable_for) = std::chrono::seconds(15);
};

// The prefix of a job's keys in etcd: its run id's.
inline std::string etcd_job_prefix(const std::string& run_id) { return "/dptrain/" + run_id + "/"; }

class EtcdStore : public c10d::Store {
 public:
  // Checks that a member answers; DistError naming every endpoint and what each said otherwise.
  explicit EtcdStore(EtcdStoreOptions options);
  ~EtcdStore() override;

  void set(const std::string& key, const std::vector<uint8_t>& value) override;
  std::vector<uint8_t> compareSet(const std::string& key, const std::vector<uint8_t>& expected,
                                  const std::vector<uint8_t>& desired) override;
  std::vector<uint8_t> get(const std::string& key) override;
  int64_t add(const std::string& key, int64_t value) override;
  bool deleteKey(const std::string& key) override;
  bool check(const std::vector<std::string>& keys) override;
  int64_t getNumKeys() override;
  void wait(const std::vector<std::string>& keys) override;
  void wait(const std::vector<std::string>& keys, const std::chrono::milliseconds& timeout) override;

  const EtcdStoreOptions& options() const { return options_; }

 private:
  class Client;
  EtcdStoreOptions options_;
  std::mutex mutex_;  // one request at a time on the kept-alive connection
  std::unique_ptr<Client> client_;
};

}  // namespace dpt::dist
