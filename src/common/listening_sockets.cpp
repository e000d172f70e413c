#include "dptrain/common/listening_sockets.h"

#include <arpa/inet.h>

#include <cstring>
#include <fstream>
#include <sstream>

namespace dpt {

namespace {

constexpr const char* kListen = "0A";  // TCP_LISTEN in /proc/net/tcp's "st" column

// "0100007F" (IPv4) or 32 hex digits (IPv6), each 32-bit word in the kernel's byte order.
std::string address_of(const std::string& hex) {
  const bool v6 = hex.size() == 32;
  unsigned char bytes[16] = {};
  for (size_t word = 0; word < hex.size() / 8; ++word) {
    const uint32_t value = static_cast<uint32_t>(std::stoul(hex.substr(word * 8, 8), nullptr, 16));
    std::memcpy(bytes + word * 4, &value, 4);  // as the kernel wrote it: host order
  }
  char text[INET6_ADDRSTRLEN] = {};
  inet_ntop(v6 ? AF_INET6 : AF_INET, bytes, text, sizeof(text));
  return text;
}

void scan(const char* table, uint16_t port, std::vector<std::string>& found) {
  std::ifstream in(table);
  std::string line;
  std::getline(in, line);  // the header
  while (std::getline(in, line)) {
    std::istringstream fields(line);
    std::string slot, local, remote, state;
    fields >> slot >> local >> remote >> state;
    const size_t colon = local.find(':');
    if (state != kListen || colon == std::string::npos) continue;
    if (std::stoul(local.substr(colon + 1), nullptr, 16) != port) continue;
    found.push_back(address_of(local.substr(0, colon)));
  }
}

}  // namespace

std::vector<std::string> listening_addresses(uint16_t port) {
  std::vector<std::string> found;
  scan("/proc/net/tcp", port, found);
  scan("/proc/net/tcp6", port, found);
  return found;
}

bool is_every_interface(const std::string& address) { return address == "0.0.0.0" || address == "::"; }

}  // namespace dpt
