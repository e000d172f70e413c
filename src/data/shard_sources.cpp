#include "shard_sources.h"

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <filesystem>

#include "dptrain/common/error.h"
#include "dptrain/common/read_file.h"
#include "dptrain/common/text.h"
#include "dptrain/data/shard_set.h"

namespace dpt::data {

namespace fs = std::filesystem;

namespace {

constexpr const char* kManifestName = "manifest.json";
constexpr int64_t kMaxBraceNames = 10'000'000;

// A manifest's text and the folder (or URL prefix) its shards are named relative to.
ShardSources from_manifest(const std::string& text, const std::string& name, const std::string& base) {
  ShardSources sources;
  sources.manifest = parse_manifest(text, name);
  for (const auto& shard : sources.manifest->shards) sources.names.push_back(base + shard.file);
  return sources;
}

ShardSources read_local_manifest(const fs::path& path) {
  const auto text = dpt::read_file<std::string>(path.string());
  DPT_CHECK(text, DataError, "cannot read manifest ", path.string(), ": ", std::strerror(errno));
  const std::string folder = path.parent_path().string();
  return from_manifest(*text, path.string(), folder.empty() ? "" : folder + "/");
}

}  // namespace

ShardSources resolve_local_shards(const std::string& spec) {
  if (spec.find('{') != std::string::npos) return {expand_braces(spec), std::nullopt};
  const fs::path path(spec);
  std::error_code error;
  if (fs::is_directory(path, error)) {
    if (fs::exists(path / kManifestName)) return read_local_manifest(path / kManifestName);
    ShardSources sources;
    for (const auto& entry : fs::directory_iterator(path)) {
      if (entry.is_regular_file() && entry.path().extension() == ".tar") sources.names.push_back(entry.path().string());
    }
    std::sort(sources.names.begin(), sources.names.end());
    DPT_CHECK(!sources.names.empty(), DataError, "folder ", spec, " holds neither a ", kManifestName,
              " nor .tar shards");
    return sources;
  }
  if (ends_with(spec, ".json")) return read_local_manifest(path);
  return {{spec}, std::nullopt};
}

ShardSources resolve_remote_shards(const std::string& spec, const RemoteStore& store) {
  if (spec.find('{') != std::string::npos) return {expand_braces(spec), std::nullopt};
  if (ends_with(spec, ".tar")) return {{spec}, std::nullopt};
  // A manifest's URL, or a folder's (its manifest.json: a remote folder cannot be listed).
  const std::string folder = ends_with(spec, "/") ? spec : spec + "/";
  const std::string manifest = ends_with(spec, ".json") ? spec : folder + kManifestName;
  return from_manifest(store.fetch_text(manifest), manifest, manifest.substr(0, manifest.rfind('/') + 1));
}

std::string index_name_of(const std::string& shard) {
  return (ends_with(shard, ".tar") ? shard.substr(0, shard.size() - 4) : shard) + ".idx";
}

bool is_shard_set(const std::string& path) {
  if (is_remote(path) || path.find('{') != std::string::npos || ends_with(path, ".tar") || ends_with(path, ".json")) {
    return true;
  }
  std::error_code error;
  if (!fs::is_directory(path, error)) return false;
  if (fs::exists(fs::path(path) / kManifestName, error)) return true;
  for (const auto& entry : fs::directory_iterator(path, error)) {
    if (entry.path().extension() == ".tar") return true;
  }
  return false;
}

std::vector<std::string> expand_braces(const std::string& pattern) {
  const size_t open = pattern.find('{');
  if (open == std::string::npos) {
    DPT_CHECK(pattern.find('}') == std::string::npos, ConfigError, "shard pattern has a '}' without its '{': ",
              pattern);
    return {pattern};
  }
  const size_t close = pattern.find('}', open);
  DPT_CHECK(close != std::string::npos, ConfigError, "shard pattern has a '{' without its '}': ", pattern);
  const std::string inside = pattern.substr(open + 1, close - open - 1);
  const std::string head = pattern.substr(0, open);
  std::vector<std::string> middles;
  const size_t dots = inside.find("..");
  if (dots != std::string::npos) {
    const std::string first = inside.substr(0, dots), last = inside.substr(dots + 2);
    const auto all_digits = [](const std::string& s) {
      const auto digit = [](char c) { return c >= '0' && c <= '9'; };
      return !s.empty() && s.size() <= 18 && std::all_of(s.begin(), s.end(), digit);
    };
    DPT_CHECK(all_digits(first) && all_digits(last), ConfigError, "shard pattern range {", inside,
              "} needs two numbers, as in {000000..000146}");
    const int64_t from = std::stoll(first), to = std::stoll(last);
    DPT_CHECK(from <= to && to - from < kMaxBraceNames, ConfigError, "shard pattern range {", inside,
              "} must go upwards and name at most ", kMaxBraceNames, " shards");
    for (int64_t i = from; i <= to; ++i) {
      middles.push_back(zero_padded(i, first.size()));
    }
  } else {
    DPT_CHECK(!inside.empty(), ConfigError, "shard pattern has an empty {}: ", pattern);
    for (size_t at = 0;;) {
      const size_t comma = inside.find(',', at);
      middles.push_back(inside.substr(at, comma - at));
      if (comma == std::string::npos) break;
      at = comma + 1;
    }
  }
  // The first brace varies slowest, as the shell expands them.
  const std::vector<std::string> tails = expand_braces(pattern.substr(close + 1));
  std::vector<std::string> names;
  names.reserve(middles.size() * tails.size());
  for (const std::string& middle : middles) {
    for (const std::string& tail : tails) names.push_back(head + middle + tail);
  }
  return names;
}

}  // namespace dpt::data
