#include "dptrain/compat/tcp_store.h"

namespace dpt::compat {

namespace {

// Sets useLibUV where TCPStoreOptions has it (2.x); the options of 1.x have nothing to set.
template <typename Options>
auto use_socket_server(Options& options, int) -> decltype(options.useLibUV = false, void()) {
  options.useLibUV = false;
}
template <typename Options>
void use_socket_server(Options&, long) {}

}  // namespace

c10d::TCPStoreOptions tcp_store_options() {
  c10d::TCPStoreOptions options;
  use_socket_server(options, 0);
  return options;
}

}  // namespace dpt::compat
