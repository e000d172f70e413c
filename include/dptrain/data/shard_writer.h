#pragma once
// Writes a dataset's encoded images as tar shards in WebDataset's format, with an index beside
// each shard and a manifest (what `dptrain make-shards` runs):
//   OUT/<prefix>-000000.tar, OUT/<prefix>-000000.idx, ..., OUT/manifest.json
// Sample k of the set has the key "<k, 9 digits>" and the members <key>.<jpg|png> (the source's
// bytes, unchanged, or those a source in memory encodes) and <key>.cls (the label in decimal).
// With max_side, an image longer than it on either side is written instead as a JPEG resized to
// fit (FFCV's max resolution): decoding it then costs a fraction of the original's, for every
// epoch of every job that reads the set.
//
// Deterministic: the shards' boundaries follow from the samples' sizes alone and every byte from
// the samples, so the same input gives the same files. Each file is written atomically (a crash
// leaves whole files or none), and a run started again over an interrupted one keeps the shards
// already whole (size and index agree with the plan) and writes the rest.
//
//   std::vector<dpt::data::SourceImage> images = ...;   // path and label, in the set's order
//   auto manifest = dpt::data::write_shards(images, classes, "out/train",
//                                           dpt::data::ShardWriterOptions().prefix("train"));

#include <torch/arg.h>

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "dptrain/data/shard_manifest.h"

namespace dpt::data {

struct SourceImage {
  std::string path;  // an encoded JPEG or PNG file
  int64_t label = 0;
  // Where the encoded image comes from when it is not a file (a CIFAR-10 record encoded as a
  // PNG); `path` then only names it in messages. Called from several threads, and once or twice
  // per image (planning needs every sample's size).
  std::function<std::vector<uint8_t>()> encoded;
};

struct ShardWriterOptions {
  // A shard closes before the sample that would take it past this many bytes (a sample larger
  // than this has a shard of its own).
  TORCH_ARG(int64_t, shard_bytes) = int64_t{256} << 20;
  // The shards' file names: <prefix>-000000.tar, ...
  TORCH_ARG(std::string, prefix) = "shard";
  // "shuffled": the samples in the order of a permutation drawn from `seed`, so that every shard
  // mixes the classes; "folder": in the order given.
  TORCH_ARG(std::string, order) = "shuffled";
  TORCH_ARG(uint64_t, seed) = 0;
  // 0: every image's bytes as they are. N > 0: an image with a side longer than N is resized
  // (PIL's bilinear filter with antialiasing, torchvision's Resize) so that its longer side is N
  // and the other keeps the aspect ratio (rounded, at least 1), then encoded as a baseline JPEG
  // of `jpeg_quality` with 4:2:0 chroma (PIL's default); smaller images keep their bytes. The
  // shards' boundaries need every sample's size, so each such image is encoded twice: once to
  // plan, once to write.
  TORCH_ARG(int, max_side) = 0;
  TORCH_ARG(int, jpeg_quality) = 90;
  // Shards written at once (and images re-encoded at once when planning).
  TORCH_ARG(int, threads) = 1;
  // Called after each shard with the samples written or kept so far and the total (from one
  // thread at a time).
  TORCH_ARG(std::function<void(int64_t done, int64_t total)>, progress);
};

// Throws DataError naming the image for a source that cannot be read or is neither JPEG nor PNG,
// ConfigError for bad options; files already written stay whole.
ShardManifest write_shards(const std::vector<SourceImage>& images, const std::vector<std::string>& classes,
                           const std::string& out_dir, const ShardWriterOptions& options);

}  // namespace dpt::data
