#include "event_file.h"

#include <cstring>

#include "crc32c.h"

namespace dpt::train {
namespace {

// Protocol buffer wire format: each field is a key varint (field number << 3 | wire type)
// followed by its value. Only the three wire types these messages use appear here.
enum WireType : uint32_t { kVarint = 0, kFixed64 = 1, kLengthDelimited = 2, kFixed32 = 5 };

void put_varint(std::string& out, uint64_t value) {
  while (value >= 0x80) {
    out.push_back(static_cast<char>((value & 0x7F) | 0x80));
    value >>= 7;
  }
  out.push_back(static_cast<char>(value));
}

void put_little_endian(std::string& out, uint64_t value, int bytes) {
  for (int i = 0; i < bytes; ++i) out.push_back(static_cast<char>((value >> (8 * i)) & 0xFF));
}

void put_key(std::string& out, uint32_t field, WireType type) {
  put_varint(out, (field << 3) | type);
}

void put_double(std::string& out, uint32_t field, double value) {
  uint64_t bits = 0;
  std::memcpy(&bits, &value, sizeof bits);
  put_key(out, field, kFixed64);
  put_little_endian(out, bits, 8);
}

void put_float(std::string& out, uint32_t field, float value) {
  uint32_t bits = 0;
  std::memcpy(&bits, &value, sizeof bits);
  put_key(out, field, kFixed32);
  put_little_endian(out, bits, 4);
}

// int64 fields encode negative numbers as their two's complement, ten bytes long.
void put_int64(std::string& out, uint32_t field, int64_t value) {
  put_key(out, field, kVarint);
  put_varint(out, static_cast<uint64_t>(value));
}

void put_bytes(std::string& out, uint32_t field, std::string_view bytes) {
  put_key(out, field, kLengthDelimited);
  put_varint(out, bytes.size());
  out.append(bytes);
}

// Field numbers of tensorflow.Event, Summary and Summary.Value.
constexpr uint32_t kWallTimeField = 1, kStepField = 2, kFileVersionField = 3, kSummaryField = 5;
constexpr uint32_t kValueField = 1;
constexpr uint32_t kTagField = 1, kSimpleValueField = 2;

std::string event_header(double wall_time, int64_t step) {
  std::string event;
  put_double(event, kWallTimeField, wall_time);
  put_int64(event, kStepField, step);
  return event;
}

}  // namespace

uint32_t masked_crc32c(std::string_view bytes) {
  const uint32_t crc = crc32c(bytes);
  return ((crc >> 15) | (crc << 17)) + 0xa282ead8u;
}

std::string tf_record(std::string_view data) {
  std::string length;
  put_little_endian(length, data.size(), 8);
  std::string record = length;
  put_little_endian(record, masked_crc32c(length), 4);
  record.append(data);
  put_little_endian(record, masked_crc32c(data), 4);
  return record;
}

std::string file_version_event(double wall_time) {
  std::string event = event_header(wall_time, 0);
  put_bytes(event, kFileVersionField, kEventFileVersion);
  return event;
}

std::string scalar_event(double wall_time, int64_t step, std::string_view tag, float value) {
  std::string summary_value;
  put_bytes(summary_value, kTagField, tag);
  put_float(summary_value, kSimpleValueField, value);
  std::string summary;
  put_bytes(summary, kValueField, summary_value);
  std::string event = event_header(wall_time, step);
  put_bytes(event, kSummaryField, summary);
  return event;
}

}  // namespace dpt::train
