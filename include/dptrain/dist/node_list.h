#pragma once
// A Slurm node list ("node[01-03,07],gpu5"), read once and expanded only on demand: a job's first
// host (its rendezvous address) is found without writing out every host of a large allocation.
//
//   dpt::dist::NodeList nodes(env_value);  // throws ConfigError, naming what is malformed
//   nodes.front();                         // "node01"
//   nodes.size();                          // 5
//   nodes.expand();                        // {"node01", "node02", "node03", "node07", "gpu5"}

#include <cstdint>
#include <string>
#include <vector>

namespace dpt::dist {

class NodeList {
 public:
  // More hosts than any Slurm cluster has: a list naming more is refused as a malformed value
  // rather than expanded into gigabytes of names.
  static constexpr int64_t kMaxHosts = 65536;

  explicit NodeList(const std::string& text);

  int64_t size() const { return size_; }
  std::string front() const;
  std::vector<std::string> expand() const;

 private:
  // "01-03" or "07": numbers keep the width of the range's first bound.
  struct Range {
    int64_t first = 0;
    int64_t last = 0;
    size_t width = 0;
  };
  // "node[01-03,07]-ib": a prefix, then one host per number of the ranges, each followed by the
  // suffix; an entry without brackets is one host, its prefix.
  struct Entry {
    std::string prefix;
    std::vector<Range> ranges;
    std::string suffix;
  };

  std::vector<Entry> entries_;
  int64_t size_ = 0;
};

}  // namespace dpt::dist
