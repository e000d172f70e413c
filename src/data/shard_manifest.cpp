#include "dptrain/data/shard_manifest.h"

#include <nlohmann/json.hpp>

#include "dptrain/common/error.h"

namespace dpt::data {

namespace {
constexpr const char* kFormat = "dptrain-shards";
constexpr int kVersion = 1;
}  // namespace

int64_t ShardManifest::samples() const {
  int64_t total = 0;
  for (const auto& shard : shards) total += shard.samples;
  return total;
}

std::string format_manifest(const ShardManifest& manifest) {
  nlohmann::ordered_json json;
  json["format"] = kFormat;
  json["version"] = kVersion;
  json["classes"] = manifest.classes;
  json["samples"] = manifest.samples();
  json["order"] = manifest.order;
  json["seed"] = manifest.seed;
  if (manifest.max_side > 0) {
    json["max_side"] = manifest.max_side;
    json["jpeg_quality"] = manifest.jpeg_quality;
  }
  json["shards"] = nlohmann::ordered_json::array();
  for (const auto& shard : manifest.shards) {
    json["shards"].push_back(
        {{"file", shard.file}, {"samples", shard.samples}, {"bytes", shard.bytes}, {"sha256", shard.sha256}});
  }
  return json.dump(1) + "\n";
}

ShardManifest parse_manifest(const std::string& text, const std::string& name) {
  const auto json = nlohmann::json::parse(text, nullptr, /*allow_exceptions=*/false);
  DPT_CHECK(json.is_object() && json.value("format", "") == kFormat, DataError, "manifest ", name,
            " is not a dptrain shard manifest (JSON with \"format\": \"", kFormat, "\")");
  DPT_CHECK(json.value("version", 0) == kVersion, DataError, "manifest ", name, " has version ",
            json.value("version", 0), "; this dptrain reads version ", kVersion);
  ShardManifest manifest;
  try {
    manifest.classes = json.at("classes").get<std::vector<std::string>>();
    manifest.order = json.value("order", "shuffled");
    manifest.seed = json.value("seed", uint64_t{0});
    manifest.max_side = json.value("max_side", 0);
    manifest.jpeg_quality = json.value("jpeg_quality", 0);
    for (const auto& shard : json.at("shards")) {
      manifest.shards.push_back({shard.at("file").get<std::string>(), shard.at("samples").get<int64_t>(),
                                 shard.at("bytes").get<int64_t>(), shard.value("sha256", "")});
    }
  } catch (const nlohmann::json::exception& e) {
    throw DataError(str("manifest ", name, " is damaged: ", e.what()));
  }
  return manifest;
}

}  // namespace dpt::data
