#include "dptrain/dist/node_list.h"

#include <algorithm>
#include <cctype>

#include "dptrain/common/error.h"
#include "dptrain/common/text.h"

namespace dpt::dist {

namespace {

bool is_number(const std::string& s) {
  return !s.empty() && std::all_of(s.begin(), s.end(), [](unsigned char c) { return std::isdigit(c); });
}

}  // namespace

NodeList::NodeList(const std::string& text) {
  auto malformed = [&](const auto&... what) {
    return ConfigError(str("malformed Slurm node list '", text, "': ", what...));
  };
  // Checked as the count grows, so that no sum of nine-digit ranges can overflow it.
  auto count = [&](int64_t hosts) {
    size_ += hosts;
    DPT_CHECK(size_ <= kMaxHosts, ConfigError, "Slurm node list '", text, "' names more than ", kMaxHosts, " hosts");
  };
  size_t i = 0;
  while (i < text.size()) {
    // One entry: a prefix, then optionally [ranges] and a suffix, up to a comma outside brackets.
    size_t open = std::string::npos, close = std::string::npos, end = i;
    for (; end < text.size() && !(text[end] == ',' && (open == std::string::npos || close != std::string::npos));
         ++end) {
      if (text[end] == '[') {
        if (open != std::string::npos && close == std::string::npos) throw malformed("nested '['");
        if (open != std::string::npos) throw malformed("entries with two bracket groups are not supported");
        open = end;
      } else if (text[end] == ']') {
        if (open == std::string::npos || close != std::string::npos) throw malformed("']' without '['");
        close = end;
      }
    }
    if (open != std::string::npos && close == std::string::npos) throw malformed("'[' is never closed");
    if (end == i) throw malformed("empty entry");
    Entry entry;
    if (open == std::string::npos) {
      entry.prefix = text.substr(i, end - i);
      count(1);
    } else {
      entry.prefix = text.substr(i, open - i);
      entry.suffix = text.substr(close + 1, end - close - 1);
      const std::string ranges = text.substr(open + 1, close - open - 1);
      for (size_t start = 0;;) {
        const size_t comma = std::min(ranges.find(',', start), ranges.size());
        const std::string item = ranges.substr(start, comma - start);
        const size_t dash = item.find('-');
        const std::string lo = item.substr(0, dash);
        const std::string hi = dash == std::string::npos ? lo : item.substr(dash + 1);
        if (dash == std::string::npos && !is_number(lo)) throw malformed("'", item, "' is not a number inside [...]");
        if (!is_number(lo) || !is_number(hi)) throw malformed("range '", item, "' needs numbers on both sides of '-'");
        if (lo.size() > 9 || hi.size() > 9) throw malformed("range '", item, "' has numbers of more than nine digits");
        Range range{std::stoll(lo), std::stoll(hi), lo.size()};
        if (range.first > range.last) throw malformed("range '", item, "' runs backwards");
        count(range.last - range.first + 1);
        entry.ranges.push_back(range);
        if (comma == ranges.size()) break;
        start = comma + 1;
      }
    }
    entries_.push_back(std::move(entry));
    i = end + 1;
  }
  DPT_CHECK(size_ > 0, ConfigError, "Slurm node list is empty");
}

std::string NodeList::front() const {
  const Entry& first = entries_.front();
  if (first.ranges.empty()) return first.prefix;
  const Range& range = first.ranges.front();
  return first.prefix + zero_padded(range.first, range.width) + first.suffix;
}

std::vector<std::string> NodeList::expand() const {
  std::vector<std::string> hosts;
  hosts.reserve(static_cast<size_t>(size_));
  for (const Entry& entry : entries_) {
    if (entry.ranges.empty()) hosts.push_back(entry.prefix);
    for (const Range& range : entry.ranges) {
      for (int64_t n = range.first; n <= range.last; ++n) {
        hosts.push_back(entry.prefix + zero_padded(n, range.width) + entry.suffix);
      }
    }
  }
  return hosts;
}

}  // namespace dpt::dist
