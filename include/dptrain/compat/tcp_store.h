#pragma once
// TCPStore options that every LibTorch build can honour, and a store whose server listens on the
// address it is named by, where the build lets us choose.
//
//   c10d::TCPStoreOptions options = dpt::compat::tcp_store_options();
//   options.port = 29500;
//   options.isServer = rank == 0;
//   auto store = dpt::compat::make_tcp_store("127.0.0.1", options);   // listens on 127.0.0.1 only (2.x)
//
// LibTorch 2.x asks for TCPStore's libuv server by default (TCPStoreOptions::useLibUV), and builds
// made without libuv, Debian's among them, then refuse to start a store at all ("use_libuv was
// requested but PyTorch was build without libuv support"). These options ask for the socket server,
// which every build has and which serves the few thousand ranks of a large job well.
//
// TCPStore's server binds its port on every interface, so a job on one host is reachable from the
// network. LibTorch 2.x can take a socket bound and listening already (masterListenFd): the server
// then listens only on the address its clients use. LibTorch 1.x cannot: there it listens on every
// interface, and only a firewall keeps strangers away (docs/security.md).

#include <string>

#include <torch/csrc/distributed/c10d/TCPStore.hpp>

namespace dpt::compat {

c10d::TCPStoreOptions tcp_store_options();

// Whether this LibTorch's store server can listen on one address (TCPStoreOptions::masterListenFd).
bool tcp_store_listens_on_one_address();

// A TCPStore on `host`:options.port. As its server (options.isServer), it listens on `host` alone
// where tcp_store_listens_on_one_address(), `host` is an IP address and this machine has it; else
// on every interface. Errors are TCPStore's own.
c10::intrusive_ptr<c10d::TCPStore> make_tcp_store(const std::string& host, c10d::TCPStoreOptions options);

}  // namespace dpt::compat
