#pragma once
// TCPStore options that every LibTorch build can honour.
//
//   c10d::TCPStoreOptions options = dpt::compat::tcp_store_options();
//   options.port = 29500;
//   auto store = c10::make_intrusive<c10d::TCPStore>("10.0.0.1", options);
//
// LibTorch 2.x asks for TCPStore's libuv server by default (TCPStoreOptions::useLibUV), and builds
// made without libuv, Debian's among them, then refuse to start a store at all ("use_libuv was
// requested but PyTorch was build without libuv support"). These options ask for the socket server,
// which every build has and which serves the few thousand ranks of a large job well.

#include <torch/csrc/distributed/c10d/TCPStore.hpp>

namespace dpt::compat {

c10d::TCPStoreOptions tcp_store_options();

}  // namespace dpt::compat
