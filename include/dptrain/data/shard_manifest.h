#pragma once
// A shard set's manifest (`manifest.json` beside its shards, written by `dptrain make-shards`):
// the classes, each shard's file, sample count, size and SHA-256, and how the set was written.
// Readers check each shard's size against it, so a shard cut short or replaced is named before
// training starts; the checksums serve downloads and `sha256sum`.
//
//   {"format": "dptrain-shards", "version": 1, "classes": ["cat", "dog"], "samples": 1200,
//    "order": "shuffled", "seed": 0, "shards": [{"file": "train-000000.tar", "samples": 600,
//    "bytes": 31457280, "sha256": "9f86d0..."}, ...]}

#include <cstdint>
#include <string>
#include <vector>

namespace dpt::data {

struct ShardFile {
  std::string file;  // relative to the manifest's folder
  int64_t samples = 0;
  int64_t bytes = 0;
  std::string sha256;  // hex
};

struct ShardManifest {
  std::vector<std::string> classes;
  std::vector<ShardFile> shards;
  // "folder": the source's order (sample i of the set is image i of the ImageFolder); "shuffled":
  // a permutation of it drawn from `seed`, so that each shard holds a mix of classes.
  std::string order = "shuffled";
  uint64_t seed = 0;
  // When non-zero, images longer than max_side were resized to it and re-encoded as JPEGs of
  // jpeg_quality (data/shard_writer.h): the pixels are no longer the source's.
  int max_side = 0;
  int jpeg_quality = 0;

  int64_t samples() const;
};

std::string format_manifest(const ShardManifest& manifest);
// DataError naming `name` for text that is not such a manifest.
ShardManifest parse_manifest(const std::string& text, const std::string& name);

}  // namespace dpt::data
