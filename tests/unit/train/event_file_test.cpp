#include <gtest/gtest.h>

#include <string>

#include "train/logs/event_file.h"

using namespace dpt::train;

namespace {

std::string bytes(std::initializer_list<int> values) {
  std::string out;
  for (int v : values) out.push_back(static_cast<char>(v));
  return out;
}

}  // namespace

// Expected masked CRCs computed independently with a bitwise CRC-32C in Python.
TEST(EventFile, MaskedCrc) {
  EXPECT_EQ(masked_crc32c("123456789"), 0xC78AB0E5u);
  EXPECT_EQ(masked_crc32c("abc"), 0x21F1576Eu);
}

TEST(EventFile, RecordFraming) {
  const std::string expected = bytes({3, 0, 0, 0, 0, 0, 0, 0,  // length, little-endian uint64
                                      0xB0, 0x99, 0x49, 0x0E,  // masked CRC of the length bytes
                                      'a', 'b', 'c',           // data
                                      0x6E, 0x57, 0xF1, 0x21});  // masked CRC of the data
  EXPECT_EQ(tf_record("abc"), expected);
}

TEST(EventFile, FileVersionEvent) {
  const std::string expected = bytes({0x09, 0, 0, 0, 0, 0, 0, 0xF8, 0x3F,  // wall_time 1.5
                                      0x10, 0x00,                           // step 0
                                      0x1A, 13}) +                          // file_version
                               "brain.Event:2";
  EXPECT_EQ(file_version_event(1.5), expected);
}

TEST(EventFile, ScalarEvent) {
  const std::string expected =
      bytes({0x09, 0, 0, 0, 0, 0, 0, 0xF8, 0x3F,  // wall_time 1.5
             0x10, 0xAC, 0x02,                     // step 300 as a varint
             0x2A, 12,                             // summary, 12 bytes
             0x0A, 10,                             //   value, 10 bytes
             0x0A, 3, 'a', '/', 'b',               //     tag
             0x15, 0, 0, 0, 0x3F});                //     simple_value 0.5f
  EXPECT_EQ(scalar_event(1.5, 300, "a/b", 0.5f), expected);
}

TEST(EventFile, NegativeStepIsTenByteVarint) {
  const std::string event = scalar_event(0.0, -1, "t", 0.0f);
  EXPECT_EQ(event.substr(9, 11), bytes({0x10, 0xFF, 0xFF, 0xFF, 0xFF, 0xFF, 0xFF, 0xFF, 0xFF, 0xFF, 0x01}));
}
