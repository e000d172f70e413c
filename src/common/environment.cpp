#include "dptrain/common/environment.h"

#include <unistd.h>  // environ

#include <cerrno>
#include <cstdlib>

#include "dptrain/common/error.h"

namespace dpt {

Environment Environment::current() {
  std::map<std::string, std::string> vars;
  for (char** entry = environ; entry != nullptr && *entry != nullptr; ++entry) {
    std::string item(*entry);
    auto eq = item.find('=');
    if (eq == std::string::npos) continue;
    vars.emplace(item.substr(0, eq), item.substr(eq + 1));
  }
  return Environment(std::move(vars));
}

std::optional<std::string> Environment::get(const std::string& name) const {
  auto it = vars_.find(name);
  if (it == vars_.end()) return std::nullopt;
  return it->second;
}

std::optional<long> Environment::get_int(const std::string& name) const {
  auto value = get(name);
  if (!value) return std::nullopt;
  errno = 0;
  char* end = nullptr;
  long parsed = std::strtol(value->c_str(), &end, 10);
  DPT_CHECK(!value->empty() && end != nullptr && *end == '\0' && errno == 0, ConfigError,
            "environment variable ", name, "='", *value, "' is not an integer; ",
            "unset it or give a whole number");
  return parsed;
}

}  // namespace dpt
