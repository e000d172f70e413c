#pragma once
// Small text helpers shared by the parsers of names and file extensions, and of /proc's lists.
//
//   if (dpt::ascii_lower(name) == "cosineannealinglr") ...   // torchvision's names, any case
//   for (auto variable : dpt::nul_terminated_entries(environ_text)) ...
//   dpt::join(names, ", ")   // "a, b, c"
//   dpt::zero_padded(17, 6)  // "000017", as shard and sample names number themselves
//   if (dpt::starts_with(url, "s3://")) ...; if (dpt::ends_with(name, ".tar")) ...
//   if (auto index = dpt::decimal_number("17")) ...   // 17; "", "-1", "1a", "+1": none

#include <algorithm>
#include <cctype>
#include <charconv>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace dpt {

// `text` with ASCII letters in lower case (other bytes unchanged, whatever the locale).
inline std::string ascii_lower(std::string text) {
  std::transform(text.begin(), text.end(), text.begin(), [](unsigned char c) { return std::tolower(c); });
  return text;
}

// Whether `text` begins, or ends, with `part` (C++20's string members, for C++17).
inline bool starts_with(std::string_view text, std::string_view part) { return text.substr(0, part.size()) == part; }
inline bool ends_with(std::string_view text, std::string_view part) {
  return text.size() >= part.size() && text.substr(text.size() - part.size()) == part;
}

// `text` as a non-negative decimal number: digits only, at least one, within uint64_t.
inline std::optional<uint64_t> decimal_number(std::string_view text) {
  uint64_t value = 0;
  const char* end = text.data() + text.size();
  const auto [stop, error] = std::from_chars(text.data(), end, value);
  if (text.empty() || error != std::errc() || stop != end) return std::nullopt;
  return value;
}

// A non-negative number in decimal, with leading zeros up to `width` digits.
inline std::string zero_padded(int64_t value, size_t width) {
  std::string digits = std::to_string(value);
  if (digits.size() < width) digits.insert(0, width - digits.size(), '0');
  return digits;
}

// The entries of NUL-terminated text, as /proc's environ and cmdline hold them ("a\0\0b\0" is
// "a", "" and "b"); a last entry without its NUL counts too. Views into `text`.
inline std::vector<std::string_view> nul_terminated_entries(std::string_view text) {
  std::vector<std::string_view> entries;
  while (!text.empty()) {
    const size_t end = text.find('\0');
    entries.push_back(text.substr(0, end));
    text.remove_prefix(end == std::string_view::npos ? text.size() : end + 1);
  }
  return entries;
}

// `items` with `separator` between them ("" for none).
inline std::string join(const std::vector<std::string>& items, std::string_view separator) {
  std::string text;
  for (size_t i = 0; i < items.size(); ++i) {
    if (i > 0) text += separator;
    text += items[i];
  }
  return text;
}

}  // namespace dpt
