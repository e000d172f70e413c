#include <gtest/gtest.h>

#include <numeric>
#include <string>

#include "train/logs/crc32c.h"

using dpt::train::crc32c;

// Check values from RFC 3720 (iSCSI) appendix B.4 and the usual "123456789" check string.
TEST(Crc32c, KnownVectors) {
  EXPECT_EQ(crc32c(""), 0u);
  EXPECT_EQ(crc32c("123456789"), 0xE3069283u);
  EXPECT_EQ(crc32c(std::string(32, '\0')), 0x8A9136AAu);
  EXPECT_EQ(crc32c(std::string(32, '\xFF')), 0x62A8AB43u);
  std::string ascending(32, '\0');
  std::iota(ascending.begin(), ascending.end(), '\0');
  EXPECT_EQ(crc32c(ascending), 0x46DD794Eu);
}

TEST(Crc32c, ContinuesOverPieces) {
  EXPECT_EQ(crc32c("6789", crc32c("12345")), 0xE3069283u);
}
