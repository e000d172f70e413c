#pragma once
// The bytes of a TensorBoard event file, without TensorFlow or protobuf: TFRecord framing around
// hand-encoded `tensorflow.Event` messages (tensorflow/core/util/event.proto, summary.proto).
//
//   std::string file = dpt::train::tf_record(dpt::train::file_version_event(now));
//   file += dpt::train::tf_record(dpt::train::scalar_event(now, /*step=*/100, "train/loss", 1.25f));
//
// A TFRecord is: uint64 length, uint32 masked CRC-32C of those 8 bytes, the data, uint32 masked
// CRC-32C of the data, all little-endian. An event file is a sequence of records whose first
// Event carries file_version "brain.Event:2" and whose later Events carry summaries.

#include <cstdint>
#include <string>
#include <string_view>

namespace dpt::train {

inline constexpr const char* kEventFileVersion = "brain.Event:2";

// The CRC-32C of `bytes`, rotated right by 15 bits plus 0xa282ead8. TFRecord stores masked CRCs
// because a CRC computed over data that itself contains CRCs is weak.
uint32_t masked_crc32c(std::string_view bytes);

// `data` framed as one TFRecord.
std::string tf_record(std::string_view data);

// Event{wall_time, step = 0, file_version = kEventFileVersion}: the first record of every file.
std::string file_version_event(double wall_time);

// Event{wall_time, step, summary = Summary{value = [Value{tag, simple_value = value}]}}: one point
// of the scalar chart named `tag`.
std::string scalar_event(double wall_time, int64_t step, std::string_view tag, float value);

}  // namespace dpt::train
