// The etcd store (dist/etcd_store.h) against a real etcd cluster on loopback: TCPStore's semantics,
// with c10d's in-memory HashStore as the oracle, atomic adds across threads, and a member's loss.
#include "dptrain/dist/etcd_store.h"

#include <future>
#include <string>
#include <vector>

#include <gtest/gtest.h>
#include <torch/csrc/distributed/c10d/HashStore.hpp>

#include "dptrain/common/error.h"
#include "support/etcd_cluster.h"
#include "support/python_oracle.h"

using dpt::dist::EtcdStore;
using dpt::dist::EtcdStoreOptions;
using std::chrono::milliseconds;

namespace {

std::vector<uint8_t> bytes(const std::string& text) { return std::vector<uint8_t>(text.begin(), text.end()); }

c10::intrusive_ptr<EtcdStore> store_on(const dpt::testing::EtcdCluster& cluster, const std::string& prefix) {
  return c10::make_intrusive<EtcdStore>(EtcdStoreOptions(cluster.endpoints(), prefix).timeout(milliseconds(2000)));
}

}  // namespace

TEST(EtcdStore, AnswersAsTheInMemoryStoreDoes) {
  dpt::testing::EtcdCluster cluster(1);
  if (!cluster.started()) DPT_MISSING_DEPENDENCY(cluster.why());
  auto etcd = store_on(cluster, "/dptrain/test/");
  c10d::HashStore memory;
  for (c10d::Store* store : std::vector<c10d::Store*>{etcd.get(), &memory}) {
    SCOPED_TRACE(store == &memory ? "HashStore" : "EtcdStore");
    store->set("a", bytes("one"));
    EXPECT_EQ(store->get("a"), bytes("one"));
    EXPECT_EQ(store->add("n", 5), 5);
    EXPECT_EQ(store->add("n", -2), 3);
    EXPECT_EQ(store->add("n", 0), 3);
    EXPECT_EQ(store->get("n"), bytes("3"));  // counters read back as text
    // compareSet: an absent key is set when nothing is expected, not when something is.
    EXPECT_EQ(store->compareSet("c", {}, bytes("first")), bytes("first"));
    EXPECT_EQ(store->compareSet("d", bytes("x"), bytes("y")), bytes("x"));
    EXPECT_FALSE(store->check({"d"}));
    EXPECT_EQ(store->compareSet("c", {}, bytes("second")), bytes("first"));  // taken: its value
    EXPECT_EQ(store->compareSet("c", bytes("other"), bytes("second")), bytes("first"));
    EXPECT_EQ(store->compareSet("c", bytes("first"), bytes("second")), bytes("second"));
    EXPECT_EQ(store->get("c"), bytes("second"));
    store->set("empty", std::vector<uint8_t>{});
    EXPECT_TRUE(store->check({"a", "c", "empty"}));
    EXPECT_TRUE(store->get("empty").empty());
    EXPECT_FALSE(store->check({"a", "missing"}));
    EXPECT_EQ(store->getNumKeys(), 4);  // a, n, c, empty
    EXPECT_TRUE(store->deleteKey("a"));
    EXPECT_FALSE(store->deleteKey("a"));
    EXPECT_EQ(store->getNumKeys(), 3);
  }
  // Binary values travel whole (base64 on the wire).
  const std::vector<uint8_t> all = [] {
    std::vector<uint8_t> v;
    for (int b = 0; b < 256; ++b) v.push_back(static_cast<uint8_t>(b));
    return v;
  }();
  etcd->set("binary", all);
  EXPECT_EQ(etcd->get("binary"), all);
  // Another prefix is another store.
  EXPECT_FALSE(store_on(cluster, "/dptrain/other/")->check({"binary"}));
}

TEST(EtcdStore, AddsFromManyClientsAreAtomicAndWaitsAreBounded) {
  dpt::testing::EtcdCluster cluster(1);
  if (!cluster.started()) DPT_MISSING_DEPENDENCY(cluster.why());
  constexpr int kClients = 4, kAdds = 25;
  std::vector<std::future<void>> clients;
  for (int c = 0; c < kClients; ++c) {
    clients.push_back(std::async(std::launch::async, [&cluster] {
      auto store = store_on(cluster, "/dptrain/adds/");
      for (int i = 0; i < kAdds; ++i) store->add("count", 1);
    }));
  }
  for (auto& c : clients) c.get();
  auto store = store_on(cluster, "/dptrain/adds/");
  EXPECT_EQ(store->add("count", 0), kClients * kAdds);  // a lost update would leave it short
  // get waits for a key set later; wait gives up at its bound, naming the key.
  auto later = std::async(std::launch::async, [&store] { return store->get("late"); });
  std::this_thread::sleep_for(milliseconds(100));
  store_on(cluster, "/dptrain/adds/")->set("late", bytes("here"));
  EXPECT_EQ(later.get(), bytes("here"));
  try {
    store->wait({"never"}, milliseconds(100));
    FAIL() << "a wait for a key nobody sets returned";
  } catch (const dpt::TimeoutError& e) {
    EXPECT_NE(std::string(e.what()).find("for never"), std::string::npos) << e.what();
  }
}

TEST(EtcdStore, GoesOnWhenAMemberIsLostAndNamesEveryMemberWhenAllAre) {
  dpt::testing::EtcdCluster cluster(3);
  if (!cluster.started()) DPT_MISSING_DEPENDENCY(cluster.why());
  auto store = c10::make_intrusive<EtcdStore>(EtcdStoreOptions(cluster.endpoints(), "/dptrain/loss/")
                                                  .timeout(milliseconds(2000))
                                                  .request_timeout(milliseconds(500))
                                                  .unavailable_for(milliseconds(5000)));
  store->set("before", bytes("1"));
  cluster.kill(0);  // the member it talks to first
  store->set("after", bytes("2"));
  EXPECT_EQ(store->get("before"), bytes("1"));
  EXPECT_EQ(store->add("n", 2), 2);
  auto impatient = c10::make_intrusive<EtcdStore>(EtcdStoreOptions(cluster.endpoints(), "/dptrain/loss/")
                                                      .request_timeout(milliseconds(300))
                                                      .unavailable_for(milliseconds(1000)));
  cluster.kill(1);  // no majority left: the last member has no leader and refuses
  try {
    impatient->set("lost", bytes("3"));
    FAIL() << "a cluster without a majority took a write";
  } catch (const dpt::DistError& e) {
    const std::string what = e.what();
    for (const auto& endpoint : cluster.endpoints()) EXPECT_NE(what.find(endpoint), std::string::npos) << what;
    EXPECT_NE(what.find("etcdctl endpoint health"), std::string::npos) << what;
  }
}
