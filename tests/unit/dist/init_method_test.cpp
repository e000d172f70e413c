#include <gtest/gtest.h>

#include "dptrain/common/error.h"
#include "dptrain/dist/init_method.h"

using dpt::dist::InitMethod;
using dpt::dist::parse_init_method;

TEST(InitMethod, Env) { EXPECT_EQ(parse_init_method("env://").kind, InitMethod::Kind::Env); }

TEST(InitMethod, Tcp) {
  auto m = parse_init_method("tcp://10.0.0.1:23456");
  EXPECT_EQ(m.kind, InitMethod::Kind::Tcp);
  EXPECT_EQ(m.host, "10.0.0.1");
  EXPECT_EQ(m.port, 23456);
  auto v6 = parse_init_method("tcp://[::1]:29500");
  EXPECT_EQ(v6.host, "::1");
  EXPECT_EQ(v6.port, 29500);
}

TEST(InitMethod, File) {
  auto m = parse_init_method("file:///shared/job/rdzv");
  EXPECT_EQ(m.kind, InitMethod::Kind::File);
  EXPECT_EQ(m.path, "/shared/job/rdzv");
}

TEST(InitMethod, BadFormsSayWhatIsAccepted) {
  for (const char* bad : {"tcp://host", "tcp://:123", "tcp://h:0", "tcp://h:99999", "tcp://h:abc",
                          "file://relative", "http://x:1", "env:/", ""}) {
    try {
      parse_init_method(bad);
      FAIL() << bad << " was accepted";
    } catch (const dpt::ConfigError& e) {
      EXPECT_NE(std::string(e.what()).find(bad), std::string::npos) << e.what();
    }
  }
}
