#pragma once
// What went wrong, read from an exception that c10d, its stores or Gloo threw.
//
//   switch (dpt::compat::failure_cause(e)) {
//     case dpt::compat::FailureCause::Timeout: ...   // say how long was waited and for whom
//
// LibTorch reports these causes in prose only (1.13 has no exception types for them, and 2.x's
// c10::DistNetworkError covers timeouts and lost peers alike), and the prose changes between
// versions: 1.13's Gloo says "Timed out waiting 1000ms for recv operation to complete", its
// TCPStore "Socket Timeout"; 2.x's store says "The client socket has timed out after 1000ms
// while trying to connect". So the patterns live here, and tests/unit/compat_test.cpp provokes
// each cause through the installed LibTorch and checks that its real message is recognised.

#include <exception>
#include <string>

namespace dpt::compat {

enum class FailureCause {
  Timeout,       // a collective, a store operation or a connection attempt ran out of time
  PeerGone,      // a peer closed, reset or refused its connection: it exited or crashed
  AddressInUse,  // a store could not listen on its port: another process holds it
  Unknown,       // none of the above; the message is all there is to say
};

// The cause that an exception's message names; Unknown when it names none.
FailureCause failure_cause(const std::string& message);
FailureCause failure_cause(const std::exception& e);

// The first line of an exception's text, without LibTorch's backtrace.
std::string short_message(const std::exception& e);

}  // namespace dpt::compat
