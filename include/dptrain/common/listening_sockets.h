#pragma once
// Which addresses listen on a TCP port of this machine, from /proc/net/tcp and tcp6: what a job
// exposes, as the kernel sees it (`dptrain check` says where the rendezvous store listens).
//
//   for (const auto& a : dpt::listening_addresses(29500)) std::cout << a << "\n";  // "127.0.0.1", "::"

#include <cstdint>
#include <string>
#include <vector>

namespace dpt {

// The local addresses with a socket listening on `port`: "127.0.0.1", "0.0.0.0" (every IPv4
// interface), "::" (every interface), ...; empty when nothing listens or /proc is unreadable.
std::vector<std::string> listening_addresses(uint16_t port);

// Whether `address` (as listening_addresses gives it) is every interface: "0.0.0.0" or "::".
bool is_every_interface(const std::string& address);

}  // namespace dpt
