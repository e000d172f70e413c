#pragma once
// The errors dptrain throws, and the two kinds of checks that throw them.
//
//   DPT_CHECK(world_size > 0, ConfigError, "--world-size must be positive, got ", world_size);
//   DPT_ASSERT(bucket.pending == 0, "bucket ", index, " finished with pending gradients");
//
// DPT_CHECK is for what a user can cause and fix (bad flags, unreachable master, a corrupt file):
// the message states the facts and what to do. DPT_ASSERT guards internal invariants: when it
// fires, dptrain has a bug, and the message says where.

#include <sstream>
#include <stdexcept>
#include <string>
#include <utility>

namespace dpt {

// Joins any streamable values into one string: str("rank ", 3, " of ", 4).
template <typename... Args>
std::string str(Args&&... args) {
  std::ostringstream out;
  (out << ... << std::forward<Args>(args));
  return out.str();
}

// Base of every error dptrain throws on purpose.
class Error : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

// Flags, environment or options that cannot work together.
class ConfigError : public Error {
 public:
  using Error::Error;
};

// Rendezvous, network and collective failures.
class DistError : public Error {
 public:
  using Error::Error;
};

// A bounded wait ran out (rendezvous, collective, child process).
class TimeoutError : public DistError {
 public:
  using DistError::DistError;
};

// Missing, unreadable or corrupt input data.
class DataError : public Error {
 public:
  using Error::Error;
};

// A checkpoint that cannot be written, read or applied.
class CheckpointError : public Error {
 public:
  using Error::Error;
};

// An invariant of dptrain itself was broken.
class InternalError : public Error {
 public:
  using Error::Error;
};

}  // namespace dpt

#define DPT_CHECK(cond, ErrorType, ...)                  \
  do {                                                   \
    if (!(cond)) {                                       \
      throw ::dpt::ErrorType(::dpt::str(__VA_ARGS__));   \
    }                                                    \
  } while (false)

#define DPT_ASSERT(cond, ...)                                                              \
  do {                                                                                     \
    if (!(cond)) {                                                                         \
      throw ::dpt::InternalError(::dpt::str("internal error at ", __FILE__, ":", __LINE__, \
                                            ": ", #cond, ". ", ##__VA_ARGS__,             \
                                            " (please report this as a dptrain bug)"));     \
    }                                                                                      \
  } while (false)
