#pragma once
// A real HTTP server on loopback for one test (Debian's nginx, scripts/install-deps), serving the
// files under a folder, with range requests, each response at most `limit_rate` bytes a second
// when given (nginx's limit_rate: "16k"); a child process killed by PID and reaped at scope exit,
// also when the test fails. requests() reads its log: which connection carried each request, and
// when.
//
//   dpt::testing::NginxServer server(dir.path() + "/www");
//   if (!server.started()) DPT_MISSING_DEPENDENCY(server.why());
//   ShardSet remote(server.url() + "/set", transform, BadImagePolicy::Error, cache);

#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstdint>
#include <fstream>
#include <iterator>
#include <string>
#include <vector>

#include "server_process.h"
#include "temp_dir.h"
#include "wait_until.h"

namespace dpt::testing {

class NginxServer {
 public:
  static constexpr const char* kNginx = "/usr/sbin/nginx";

  // A request as the server logged it when its response ended.
  struct Request {
    std::string uri;
    int64_t connection;  // nginx's serial number of the connection that carried it
    double started, ended;  // seconds since the epoch, to the millisecond
  };

  explicit NginxServer(const std::string& root, const std::string& limit_rate = "") : port_(free_port()) {
    if (access(kNginx, X_OK) != 0) {
      why_ = std::string(kNginx) + " is missing (Debian's nginx; scripts/install-deps installs it)";
      return;
    }
    // One process in the foreground, its temporary files and logs in a folder of the test's own.
    const std::string prefix = dir_.path();
    std::ofstream(prefix + "/nginx.conf")
        << "daemon off; master_process off; worker_processes 1; pid " << prefix << "/nginx.pid; error_log stderr;\n"
        << "events { worker_connections 64; }\n"
        << "http {\n  log_format requests '$request_uri $connection $msec $request_time';\n"
        << "  access_log " << prefix << "/access.log requests;\n"
        << (limit_rate.empty() ? "" : "  limit_rate " + limit_rate + ";\n")
        << "  client_body_temp_path " << prefix << "/body; proxy_temp_path " << prefix << "/proxy;\n"
        << "  fastcgi_temp_path " << prefix << "/fastcgi; uwsgi_temp_path " << prefix << "/uwsgi;\n"
        << "  scgi_temp_path " << prefix << "/scgi;\n"
        << "  server { listen 127.0.0.1:" << port_ << "; root " << root << "; }\n}\n";
    pid_ = spawn_server({kNginx, "-p", prefix, "-c", prefix + "/nginx.conf"}, prefix + "/nginx.out");
    const bool settled = wait_until(
        [&] {
          if (listening(port_)) return true;
          if (waitpid(pid_, nullptr, WNOHANG) != pid_) return false;
          pid_ = -1;  // exited, and reaped
          return true;
        },
        std::chrono::seconds(30));
    if (!settled || pid_ <= 0) {
      std::ifstream output(prefix + "/nginx.out");
      why_ = "nginx did not listen on port " + std::to_string(port_) + " within 30 s; it said: " +
             std::string(std::istreambuf_iterator<char>(output), {});
    }
  }
  ~NginxServer() {
    if (pid_ <= 0) return;
    ::kill(pid_, SIGKILL);
    waitpid(pid_, nullptr, 0);
  }
  NginxServer(const NginxServer&) = delete;
  NginxServer& operator=(const NginxServer&) = delete;

  bool started() const { return why_.empty(); }
  const std::string& why() const { return why_; }
  // "http://127.0.0.1:PORT", the root folder's URL.
  std::string url() const { return "http://127.0.0.1:" + std::to_string(port_); }

  // The requests whose responses have ended, in the order they ended.
  std::vector<Request> requests() const {
    std::vector<Request> requests;
    std::ifstream log(dir_.path() + "/access.log");
    Request request;
    double seconds = 0;
    while (log >> request.uri >> request.connection >> request.ended >> seconds) {
      request.started = request.ended - seconds;
      requests.push_back(request);
    }
    return requests;
  }

 private:
  TempDir dir_;
  int port_;
  pid_t pid_ = -1;
  std::string why_;
};

}  // namespace dpt::testing
