#pragma once
// Init methods, named and parsed as PyTorch names them:
//   env://                 master address and port from the WorldInfo (MASTER_ADDR, MASTER_PORT)
//   tcp://host:port        rank 0 listens on host:port, the others connect to it
//   file:///shared/path    a file on a filesystem every rank sees (Slurm jobs without a fixed port)

#include <string>

namespace dpt::dist {

struct InitMethod {
  enum class Kind { Env, Tcp, File };
  Kind kind = Kind::Env;
  std::string host;  // Tcp only
  int port = 0;      // Tcp only
  std::string path;  // File only
  std::string url;   // as given, for messages
};

// Throws ConfigError with the accepted forms when `url` is none of them.
InitMethod parse_init_method(const std::string& url);

}  // namespace dpt::dist
