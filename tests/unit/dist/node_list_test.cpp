#include "dptrain/dist/node_list.h"

#include <gtest/gtest.h>

#include "dptrain/common/error.h"

using dpt::dist::NodeList;

namespace {

using Hosts = std::vector<std::string>;

std::string config_error_of(const std::string& text) {
  try {
    NodeList list(text);
  } catch (const dpt::ConfigError& e) {
    return e.what();
  }
  return "no error";
}

}  // namespace

TEST(NodeList, Forms) {
  EXPECT_EQ(NodeList("node1").expand(), Hosts({"node1"}));
  EXPECT_EQ(NodeList("node[01-03,07],gpu5").expand(), Hosts({"node01", "node02", "node03", "node07", "gpu5"}));
  EXPECT_EQ(NodeList("a[1-2],b[09-11]").expand(), Hosts({"a1", "a2", "b09", "b10", "b11"}));
  EXPECT_EQ(NodeList("rack[3]-n").expand(), Hosts({"rack3-n"}));
  EXPECT_EQ(NodeList("x[8-10]").expand(), Hosts({"x8", "x9", "x10"}));
  EXPECT_EQ(NodeList("n[1-2]-ib,m").expand(), Hosts({"n1-ib", "n2-ib", "m"}));
}

TEST(NodeList, MalformedListsAreNamed) {
  for (const char* bad : {"node[01-", "node[a-b]", "node[3-1]", "", "node]1[", "a,,b", "n[1-2", "n[[1]]", "n[1,]",
                          "n[-1]"}) {
    EXPECT_THROW(NodeList list(bad), dpt::ConfigError) << bad;
  }
  EXPECT_NE(config_error_of("n[1]x[2]").find("two bracket groups are not supported"), std::string::npos);
  EXPECT_NE(config_error_of("n[3-1]").find("range '3-1' runs backwards"), std::string::npos);
}

// Found by fuzz/world_fuzzer.cpp: numbers too large for std::stol and std::stoi escaped as
// std::out_of_range (fuzz/regressions/world/).
TEST(NodeList, NumbersTooLargeAreNamed) {
  EXPECT_NE(config_error_of("node[1-99999999999999999999]").find("has numbers of more than nine digits"),
            std::string::npos);
}

// A large allocation's first host and size are read without writing out its names (found by the
// fuzzer: a list of 58888 hosts was written out in full for its first, over a second under the
// sanitizers); a list of more hosts than a cluster has is refused, however its ranges add up.
TEST(NodeList, TheFirstHostOfALargeListIsReadWithoutExpandingIt) {
  NodeList large("gpu[00001-60000]-ib,login");
  EXPECT_EQ(large.size(), 60001);
  EXPECT_EQ(large.front(), "gpu00001-ib");
  const Hosts hosts = large.expand();
  ASSERT_EQ(hosts.size(), 60001u);
  EXPECT_EQ(hosts[59999], "gpu60000-ib");
  EXPECT_EQ(hosts.back(), "login");

  EXPECT_EQ(NodeList("n[0-65535]").size(), NodeList::kMaxHosts);
  EXPECT_NE(config_error_of("n[0-65536]").find("names more than 65536 hosts"), std::string::npos);
  EXPECT_NE(config_error_of("n[0-40000],m[0-40000]").find("names more than 65536 hosts"), std::string::npos);
  EXPECT_NE(config_error_of("n[0-999999999,0-999999999]").find("names more than 65536 hosts"), std::string::npos);
}
