#include "dptrain/data/remote_store.h"

#include <gtest/gtest.h>

#include <chrono>
#include <filesystem>
#include <fstream>
#include <set>
#include <thread>

#include "support/nginx_server.h"
#include "support/python_oracle.h"
#include "support/temp_dir.h"
#include "support/wait_until.h"

using namespace dpt::data;

namespace {

std::set<int64_t> connections_of(const std::vector<dpt::testing::NginxServer::Request>& requests) {
  std::set<int64_t> connections;
  for (const auto& request : requests) connections.insert(request.connection);
  return connections;
}

}  // namespace

// A thread's fetches from one server go over one connection, kept open between them (no handshake
// and no slow start per shard on a link with round trips); the negative control, each fetch on a
// thread of its own, shows the server's log telling connections apart.
TEST(RemoteStore, KeepsAThreadsConnectionBetweenFetches) {
  dpt::testing::TempDir dir;
  std::filesystem::create_directories(dir.path() + "/www");
  for (int k = 0; k < 3; ++k) std::ofstream(dir.path() + "/www/" + std::to_string(k)) << std::string(1000 + k, 'x');
  dpt::testing::NginxServer server(dir.path() + "/www");
  if (!server.started()) DPT_MISSING_DEPENDENCY(server.why());
  const RemoteStore store;

  // nginx logs a request once its response is sent, which may be after curl has it all.
  const auto logged = [&](size_t count) {
    EXPECT_TRUE(dpt::testing::wait_until([&] { return server.requests().size() >= count; }, std::chrono::seconds(30)));
    return server.requests();
  };
  std::thread([&] {
    for (int k = 0; k < 3; ++k) EXPECT_EQ(store.fetch_text(server.url() + "/" + std::to_string(k)).size(), 1000u + k);
  }).join();
  auto requests = logged(3);
  ASSERT_EQ(requests.size(), 3u);
  EXPECT_EQ(connections_of(requests).size(), 1u);

  for (int k = 0; k < 3; ++k) {
    std::thread([&] { store.fetch_text(server.url() + "/" + std::to_string(k)); }).join();
  }
  requests = logged(6);
  ASSERT_EQ(requests.size(), 6u);
  EXPECT_EQ(connections_of({requests.begin() + 3, requests.end()}).size(), 3u);
}
