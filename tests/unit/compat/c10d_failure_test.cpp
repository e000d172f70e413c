// Each failure cause is provoked through the installed LibTorch's own c10d (stores, sockets, Gloo),
// so that a version whose wording moves breaks these tests instead of dptrain's error messages.

#include <gtest/gtest.h>

#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <functional>
#include <thread>

#include <torch/csrc/distributed/c10d/HashStore.hpp>
#include <torch/csrc/distributed/c10d/PrefixStore.hpp>
#include <torch/csrc/distributed/c10d/ProcessGroupGloo.hpp>
#include <torch/csrc/distributed/c10d/TCPStore.hpp>
#include <torch/torch.h>

#include "dptrain/compat/c10d_failure.h"
#include "dptrain/compat/tcp_store.h"
#include "support/wait_until.h"

using dpt::compat::FailureCause;

namespace dpt::compat {
// gtest prints the cause by name.
void PrintTo(FailureCause cause, std::ostream* out) {
  const char* names[] = {"Timeout", "PeerGone", "AddressInUse", "Unknown"};
  *out << names[static_cast<int>(cause)];
}
}  // namespace dpt::compat

using dpt::compat::failure_cause;
using namespace std::chrono_literals;

namespace {

// The message `action` throws, first line only; fails the test when it throws nothing.
std::string message_of(const std::function<void()>& action) {
  try {
    action();
  } catch (const std::exception& e) {
    return dpt::compat::short_message(e);
  }
  ADD_FAILURE() << "expected an exception";
  return "";
}

// A TCP socket listening on a free loopback port, closed with the object.
class Listener {
 public:
  Listener() : fd_(socket(AF_INET, SOCK_STREAM, 0)) {
    sockaddr_in address{};
    address.sin_family = AF_INET;
    address.sin_addr.s_addr = htonl(INADDR_ANY);
    socklen_t length = sizeof(address);
    EXPECT_EQ(bind(fd_, reinterpret_cast<sockaddr*>(&address), length), 0);
    EXPECT_EQ(listen(fd_, 1), 0);
    EXPECT_EQ(getsockname(fd_, reinterpret_cast<sockaddr*>(&address), &length), 0);
    port_ = ntohs(address.sin_port);
  }
  ~Listener() { close(fd_); }
  Listener(const Listener&) = delete;
  Listener& operator=(const Listener&) = delete;
  std::uint16_t port() const { return port_; }

 private:
  int fd_;
  std::uint16_t port_ = 0;
};

c10d::TCPStoreOptions store_options(std::uint16_t port, bool server) {
  c10d::TCPStoreOptions options = dpt::compat::tcp_store_options();
  options.port = port;
  options.isServer = server;
  options.waitWorkers = false;
  options.timeout = 500ms;
  return options;
}

// Gloo's timeout: the collective that runs out of time waits this long, and both ranks must have
// connected within it. Seconds, so that a loaded machine's slow thread start cannot run it out
// while the two groups connect.
constexpr auto kGlooTimeout = 2s;

// What rank 1 of gloo_all_reduce_failure sees of rank 0. Each wait ends within 60 s.
struct Rank0Progress {
  std::atomic<bool> connected{false};
  std::atomic<bool> done{false};  // its all_reduce ended, or its group never connected

  void wait_until_connected() const { dpt::testing::wait_until([&] { return connected || done; }, 60s); }
  void wait_until_done() const { dpt::testing::wait_until([&] { return done.load(); }, 60s); }
};

// Two Gloo ranks as threads; rank 0 all-reduces and its failure's message is returned. Rank 1
// first runs `rank1` (which decides whether it stays or leaves), then ends. Neither group's
// construction may fail: that is the test's failure, reported, and the thread still joined.
std::string gloo_all_reduce_failure(const std::function<void(const Rank0Progress& rank0)>& rank1) {
  auto store = c10::make_intrusive<c10d::HashStore>();
  auto make_backend = [&](int rank) {
    auto options = c10d::ProcessGroupGloo::Options::create(kGlooTimeout);
    options->devices.push_back(c10d::ProcessGroupGloo::createDeviceForHostname("127.0.0.1"));
    return c10::make_intrusive<c10d::ProcessGroupGloo>(c10::make_intrusive<c10d::PrefixStore>("gloo", store), rank,
                                                        2, options);
  };
  Rank0Progress rank0;
  std::thread peer([&] {
    try {
      auto backend = make_backend(1);
      rank1(rank0);
    } catch (const std::exception& e) {
      ADD_FAILURE() << "rank 1's Gloo group could not connect: " << e.what();
    }
  });
  std::string message;
  try {
    auto backend = make_backend(0);
    rank0.connected = true;
    message = message_of([&] {
      std::vector<at::Tensor> tensors{torch::ones({3})};
      backend->allreduce(tensors)->wait();
    });
  } catch (const std::exception& e) {
    ADD_FAILURE() << "rank 0's Gloo group could not connect: " << e.what();
  }
  rank0.done = true;
  peer.join();
  return message;
}

}  // namespace

TEST(C10dFailure, GlooCollectiveThatRunsOutOfTimeIsATimeout) {
  const std::string message = gloo_all_reduce_failure([](const Rank0Progress& rank0) {
    rank0.wait_until_done();  // alive, never joins the all_reduce
  });
  EXPECT_EQ(failure_cause(message), FailureCause::Timeout) << message;
}

TEST(C10dFailure, GlooPeerThatLeavesIsAPeerGone) {
  // Rank 1 leaves (its group closes) once rank 0 is connected: leaving earlier would fail rank 0's
  // connection instead of its all_reduce.
  const std::string message =
      gloo_all_reduce_failure([](const Rank0Progress& rank0) { rank0.wait_until_connected(); });
  EXPECT_EQ(failure_cause(message), FailureCause::PeerGone) << message;
}

TEST(C10dFailure, StoreWaitForAMissingKeyIsATimeout) {
  c10d::HashStore store;
  const std::string message = message_of([&] { store.wait({"never-set"}, 100ms); });
  EXPECT_EQ(failure_cause(message), FailureCause::Timeout) << message;
}

TEST(C10dFailure, StoreClientWithNoServerIsATimeout) {
  std::uint16_t port;
  {
    Listener probe;  // a port that was free a moment ago and now has no listener
    port = probe.port();
  }
  const std::string message =
      message_of([&] { (void)c10::make_intrusive<c10d::TCPStore>("127.0.0.1", store_options(port, false)); });
  EXPECT_EQ(failure_cause(message), FailureCause::Timeout) << message;
}

TEST(C10dFailure, StoreServerOnABusyPortIsAnAddressInUse) {
  Listener holder;
  const std::string message =
      message_of([&] { (void)c10::make_intrusive<c10d::TCPStore>("127.0.0.1", store_options(holder.port(), true)); });
  EXPECT_EQ(failure_cause(message), FailureCause::AddressInUse) << message;
}

TEST(C10dFailure, OtherMessagesAreUnknown) {
  EXPECT_EQ(failure_cause("Tensors must be contiguous"), FailureCause::Unknown);
  EXPECT_EQ(failure_cause(std::runtime_error("invalid rank 7")), FailureCause::Unknown);
}
