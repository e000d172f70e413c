#include "dptrain/compat/tcp_store.h"

#include <netdb.h>
#include <sys/socket.h>
#include <unistd.h>

#include <memory>

namespace dpt::compat {

namespace {

// Sets useLibUV where TCPStoreOptions has it (2.x); the options of 1.x have nothing to set.
template <typename Options>
auto use_socket_server(Options& options, int) -> decltype(options.useLibUV = false, void()) {
  options.useLibUV = false;
}
template <typename Options>
void use_socket_server(Options&, long) {}

// Hands `fd` to the server where TCPStoreOptions takes a listening socket (2.x); false on 1.x.
template <typename Options>
auto take_socket(Options& options, int fd, int) -> decltype(options.masterListenFd = fd, bool()) {
  options.masterListenFd = fd;
  return true;
}
template <typename Options>
bool take_socket(Options&, int, long) {
  return false;
}

// A socket bound to `host`:`port` and listening, or -1 when `host` is a name, when this machine
// has no such address (behind NAT) or when the port is taken: TCPStore's own listener then takes
// every interface, or says what it says about the port. Only an IP address: a host name can
// resolve to another address here than on the other machines (Debian maps its own name to
// 127.0.1.1), and a listener there would be out of their reach.
int listen_at(const std::string& host, uint16_t port) {
  addrinfo hints{};
  hints.ai_socktype = SOCK_STREAM;
  hints.ai_flags = AI_NUMERICHOST | AI_NUMERICSERV;
  addrinfo* found = nullptr;
  if (getaddrinfo(host.c_str(), std::to_string(port).c_str(), &hints, &found) != 0) return -1;
  const std::unique_ptr<addrinfo, decltype(&freeaddrinfo)> addresses(found, &freeaddrinfo);
  for (const addrinfo* a = addresses.get(); a != nullptr; a = a->ai_next) {
    const int fd = socket(a->ai_family, a->ai_socktype | SOCK_CLOEXEC, a->ai_protocol);
    if (fd < 0) continue;
    const int on = 1;
    setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &on, sizeof(on));  // as TCPStore's own listener
    if (bind(fd, a->ai_addr, a->ai_addrlen) == 0 && listen(fd, SOMAXCONN) == 0) return fd;
    close(fd);
  }
  return -1;
}

}  // namespace

c10d::TCPStoreOptions tcp_store_options() {
  c10d::TCPStoreOptions options;
  use_socket_server(options, 0);
  return options;
}

bool tcp_store_listens_on_one_address() {
  c10d::TCPStoreOptions options;
  return take_socket(options, -1, 0);
}

c10::intrusive_ptr<c10d::TCPStore> make_tcp_store(const std::string& host, c10d::TCPStoreOptions options) {
  if (options.isServer && tcp_store_listens_on_one_address()) {
    const int fd = listen_at(host, options.port);
    if (fd >= 0) take_socket(options, fd, 0);  // the server owns it from here, and closes it
  }
  return c10::make_intrusive<c10d::TCPStore>(host, options);
}

}  // namespace dpt::compat
