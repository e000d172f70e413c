#pragma once
// Where a shard set's shards are (shard_set.h lists the ways to name a set): their names, local
// paths or URLs, in order, and the manifest when the set has one. Private to the data layer.

#include <optional>
#include <string>
#include <vector>

#include "dptrain/data/remote_store.h"
#include "dptrain/data/shard_manifest.h"

namespace dpt::data {

struct ShardSources {
  std::vector<std::string> names;
  std::optional<ShardManifest> manifest;
};

// `store` fetches a remote set's manifest; ConfigError or DataError naming the spec when the set
// cannot be found.
ShardSources resolve_shard_sources(const std::string& spec, const RemoteStore& store);

// `x.tar` -> `x.idx`, for paths and URLs alike.
std::string index_name_of(const std::string& shard);

}  // namespace dpt::data
