#include "dptrain/common/environment.h"

#include <unistd.h>  // environ

#include <cerrno>
#include <cstdlib>

#include "dptrain/common/error.h"
#include "dptrain/common/read_file.h"
#include "dptrain/common/text.h"

namespace dpt {
namespace {

// NAME=value; an entry without '=' is no variable. The first of a repeated name counts, as
// getenv finds it.
void add_entry(std::map<std::string, std::string>& vars, std::string_view entry) {
  const auto eq = entry.find('=');
  if (eq == std::string_view::npos) return;
  vars.emplace(std::string(entry.substr(0, eq)), std::string(entry.substr(eq + 1)));
}

}  // namespace

Environment Environment::current() {
  std::map<std::string, std::string> vars;
  for (char** entry = environ; entry != nullptr && *entry != nullptr; ++entry) add_entry(vars, *entry);
  return Environment(std::move(vars));
}

Environment Environment::at_start() {
  return from_entries(read_file<std::string>("/proc/self/environ").value_or(""));
}

Environment Environment::from_entries(std::string_view entries) {
  std::map<std::string, std::string> vars;
  for (const auto entry : nul_terminated_entries(entries)) add_entry(vars, entry);
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
