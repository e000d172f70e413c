#pragma once
// Small text helpers shared by the parsers of names and file extensions.
//
//   if (dpt::ascii_lower(name) == "cosineannealinglr") ...   // torchvision's names, any case

#include <algorithm>
#include <cctype>
#include <string>

namespace dpt {

// `text` with ASCII letters in lower case (other bytes unchanged, whatever the locale).
inline std::string ascii_lower(std::string text) {
  std::transform(text.begin(), text.end(), text.begin(), [](unsigned char c) { return std::tolower(c); });
  return text;
}

}  // namespace dpt
