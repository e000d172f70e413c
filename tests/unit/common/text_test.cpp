#include "dptrain/common/text.h"

#include <gtest/gtest.h>

// Digits only: no sign, space or other base, and nothing past uint64_t.
TEST(Text, DecimalNumberTakesDigitsOnly) {
  EXPECT_EQ(dpt::decimal_number("0"), 0u);
  EXPECT_EQ(dpt::decimal_number("17"), 17u);
  EXPECT_EQ(dpt::decimal_number("007"), 7u);
  EXPECT_EQ(dpt::decimal_number("18446744073709551615"), UINT64_MAX);
  for (const char* refused : {"", "-1", "+1", " 1", "1 ", "1a", "0x10", "1.5", "18446744073709551616"}) {
    EXPECT_FALSE(dpt::decimal_number(refused)) << "'" << refused << "'";
  }
}
