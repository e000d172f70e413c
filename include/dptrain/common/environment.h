#pragma once
// A snapshot of the process environment, taken once at the edge (the CLI, init_process_group) and
// passed down as a value. Nothing below reads getenv, so tests can hand in any environment.
//
//   auto env = dpt::Environment::current();
//   auto world = dpt::dist::detect_world(env, overrides);

#include <map>
#include <optional>
#include <string>
#include <string_view>

namespace dpt {

class Environment {
 public:
  Environment() = default;
  explicit Environment(std::map<std::string, std::string> vars) : vars_(std::move(vars)) {}

  // The variables of this process, as they are now.
  static Environment current();
  // The variables this process started with (/proc/self/environ), as libraries that read theirs
  // once at load time saw them, whatever was set since. Empty where /proc cannot be read.
  static Environment at_start();
  // The variables in NUL-separated NAME=value entries, as a /proc/PID/environ holds them (the last
  // entry's NUL may be missing).
  static Environment from_entries(std::string_view entries);

  // The value of `name`, or nullopt when unset. Set-but-empty counts as set.
  std::optional<std::string> get(const std::string& name) const;
  bool has(const std::string& name) const { return vars_.count(name) != 0; }
  void set(const std::string& name, std::string value) { vars_[name] = std::move(value); }

  // The value of `name` as an integer; throws ConfigError naming the variable when malformed.
  std::optional<long> get_int(const std::string& name) const;

  const std::map<std::string, std::string>& vars() const { return vars_; }

 private:
  std::map<std::string, std::string> vars_;
};

}  // namespace dpt
