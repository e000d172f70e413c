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

// ConfigError or DataError naming the spec when the set cannot be found.
// A set on disk: a manifest, a folder (its manifest, else its .tar files), a pattern or one shard.
ShardSources resolve_local_shards(const std::string& spec);
// A set at http(s):// or s3:// names (is_remote): `store` fetches its manifest; a remote folder,
// which cannot be listed, must hold one.
ShardSources resolve_remote_shards(const std::string& spec, const RemoteStore& store);

// `x.tar` -> `x.idx`, for paths and URLs alike.
std::string index_name_of(const std::string& shard);

}  // namespace dpt::data
