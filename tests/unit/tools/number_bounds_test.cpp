#include <gtest/gtest.h>

#include <limits>
#include <string>
#include <vector>

#include "number_bounds.h"

using namespace dpt::cli;

namespace {

// What parsing `--x VALUE` against the validator says: "" when accepted, else CLI11's message.
std::string parse(const CLI::Validator& bounds, const std::string& value) {
  CLI::App app;
  double x = 0;
  app.add_option("--x", x)->check(bounds);
  std::vector<std::string> args = {value, "--x"};  // CLI11 takes them last first
  try {
    app.parse(args);
  } catch (const CLI::ParseError& e) {
    return e.what();
  }
  return "";
}

}  // namespace

TEST(NumberBounds, WithinTakesBothEndsAndRefusesNaNAndTheInfinities) {
  for (const char* value : {"0", "1", "0.5", "-0"}) EXPECT_EQ(parse(within(0, 1), value), "") << value;
  EXPECT_EQ(parse(within(0, 1), "nan"), "--x: takes a number from 0 to 1, got nan");
  for (const char* value : {"NaN", "-nan", "inf", "-inf", "-0.001", "1.0001", "1e300"}) {
    EXPECT_EQ(parse(within(0, 1), value), std::string("--x: takes a number from 0 to 1, got ") + value) << value;
  }
}

TEST(NumberBounds, AtLeastTakesItsBoundAndAnyFiniteNumberAbove) {
  for (const char* value : {"1", "2", "1e300"}) EXPECT_EQ(parse(at_least(1), value), "") << value;
  for (const char* value : {"0.999", "nan", "inf", "-inf"}) {
    EXPECT_EQ(parse(at_least(1), value), std::string("--x: takes a number of at least 1, got ") + value) << value;
  }
}

TEST(NumberBounds, AboveRefusesItsBound) {
  EXPECT_EQ(parse(above(0), "1e-300"), "");
  for (const char* value : {"0", "-0", "nan", "inf", "-1"}) {
    EXPECT_EQ(parse(above(0), value), std::string("--x: takes a number above 0, got ") + value) << value;
  }
}

TEST(NumberBounds, AnInfiniteBoundTakesItsInfinity) {
  EXPECT_EQ(parse(within(0, std::numeric_limits<double>::infinity()), "inf"), "");
  EXPECT_EQ(parse(within(0, std::numeric_limits<double>::infinity()), "nan"),
            "--x: takes a number from 0 to inf, got nan");
}

// A bound larger than six digits shows as C++ streams show it, in the message and in --help.
TEST(NumberBounds, LargeBoundsShowInShortForm) {
  EXPECT_EQ(parse(within(8, 1e9), "7"), "--x: takes a number from 8 to 1e+09, got 7");
}

// Not a number at all: the option's own conversion answers, naming the type it wanted.
TEST(NumberBounds, WhatIsNotANumberIsLeftToTheConversion) {
  const std::string message = parse(at_least(0), "ten");
  EXPECT_NE(message.find("ten"), std::string::npos) << message;
  EXPECT_EQ(message.find("takes a number"), std::string::npos) << message;
}
