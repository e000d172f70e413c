#pragma once
// A real etcd cluster on loopback for one test (Debian's etcd-server, scripts/install-deps): each
// member a child process on free ports, with its data in a fresh folder; killed by PID and reaped
// at scope exit, also when the test fails.
//
//   dpt::testing::EtcdCluster cluster(3);
//   if (!cluster.started()) DPT_MISSING_DEPENDENCY(cluster.why());
//   auto store = c10::make_intrusive<dpt::dist::EtcdStore>(EtcdStoreOptions(cluster.endpoints(), "/t/"));
//   cluster.kill(0);  // the others keep a majority

#include <signal.h>
#include <sys/wait.h>

#include <string>
#include <vector>

#include "server_process.h"
#include "temp_dir.h"

namespace dpt::testing {

class EtcdCluster {
 public:
  static constexpr const char* kEtcd = "/usr/bin/etcd";

  explicit EtcdCluster(int members) {
    if (access(kEtcd, X_OK) != 0) {
      why_ = std::string(kEtcd) + " is missing (Debian's etcd-server; scripts/install-deps installs it)";
      return;
    }
    std::vector<int> client_ports, peer_ports;
    std::string initial;
    for (int m = 0; m < members; ++m) {
      client_ports.push_back(free_port());
      peer_ports.push_back(free_port());
      initial += (m ? "," : "") + name(m) + "=http://127.0.0.1:" + std::to_string(peer_ports[m]);
    }
    for (int m = 0; m < members; ++m) {
      const std::string client = "http://127.0.0.1:" + std::to_string(client_ports[m]);
      const std::string peer = "http://127.0.0.1:" + std::to_string(peer_ports[m]);
      endpoints_.push_back("127.0.0.1:" + std::to_string(client_ports[m]));
      const std::vector<std::string> args = {kEtcd, "--name", name(m), "--data-dir", dir_.path() + "/" + name(m),
                                             "--listen-client-urls", client, "--advertise-client-urls", client,
                                             "--listen-peer-urls", peer, "--initial-advertise-peer-urls", peer,
                                             "--initial-cluster", initial, "--initial-cluster-state", "new",
                                             "--initial-cluster-token", "dptrain-test"};
      pids_.push_back(spawn_server(args, dir_.path() + "/" + name(m) + ".log"));
    }
  }
  ~EtcdCluster() {
    for (size_t m = 0; m < pids_.size(); ++m) kill(static_cast<int>(m));
  }
  EtcdCluster(const EtcdCluster&) = delete;
  EtcdCluster& operator=(const EtcdCluster&) = delete;

  bool started() const { return why_.empty(); }
  const std::string& why() const { return why_; }
  // Each member's client endpoint, "127.0.0.1:PORT".
  const std::vector<std::string>& endpoints() const { return endpoints_; }
  // SIGKILL to member `m`, reaped.
  void kill(int m) {
    pid_t& pid = pids_.at(static_cast<size_t>(m));
    if (pid <= 0) return;
    ::kill(pid, SIGKILL);
    waitpid(pid, nullptr, 0);
    pid = -1;
  }

 private:
  static std::string name(int m) { return "m" + std::to_string(m); }

  TempDir dir_;
  std::vector<std::string> endpoints_;
  std::vector<pid_t> pids_;
  std::string why_;
};

}  // namespace dpt::testing
