#pragma once
// What a shard holds, sample by sample: where its image's bytes lie in the tar and its label. A
// shard's samples are WebDataset's: the members that share a key (the path up to the first dot
// of the file name) and follow each other, here one image (`.jpg`, `.jpeg` or `.png`) and one
// label (`.cls`, the class index in decimal); other members (`.json`, `.txt`) are left alone.
//
// make-shards writes each shard's index beside it (`train-000000.idx`); a shard written by another
// tool gets one from a scan of its headers (index_shard), which reads nothing but the headers and
// the labels.
//
//   dpt::data::ShardIndex index = dpt::data::parse_shard_index(text, "train-000000.idx");
//   index.samples[3].offset;   // of the image's first byte in the tar

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "dptrain/data/dataset.h"
#include "dptrain/data/tar_archive.h"

namespace dpt::data {

struct ShardSample {
  std::string key;
  std::string image;  // the image member's extension ("jpg"), for messages
  int64_t offset = 0;
  int64_t size = 0;
  int64_t label = 0;
};

struct ShardIndex {
  int64_t archive_size = 0;  // of the tar the index describes: a stale index is refused
  std::vector<ShardSample> samples;
  // Samples left out under BadImagePolicy::Skip (no image, no label, a label that is no number),
  // one line each naming the shard and the key.
  std::vector<std::string> skipped;
};

// A shard's samples as a set keeps them while it is open, packed: ImageNet's 1.28 M samples take
// about 40 bytes each (ShardSample's strings and 64-bit fields take 88, and every rank holds the
// whole set's). An image member of 4 GiB or more, or a label past 2^31, is a DataError naming
// the shard: no image dptrain decodes is that large.
class PackedShardIndex {
 public:
  PackedShardIndex(const ShardIndex& index, const std::string& shard);
  size_t size() const { return offsets_.size(); }
  int64_t offset(size_t sample) const { return offsets_[sample]; }
  int64_t bytes(size_t sample) const { return sizes_[sample]; }
  int64_t label(size_t sample) const { return labels_[sample]; }
  // "<key>.<image extension>"
  std::string_view member(size_t sample) const;
  // The bytes its arrays hold: 20 a sample and the member names.
  int64_t bytes_held() const;

 private:
  std::vector<int64_t> offsets_;
  std::vector<uint32_t> sizes_;
  std::vector<int32_t> labels_;
  std::vector<uint32_t> member_ends_;  // in members_
  std::string members_;                // the samples' member names, one after the other
};

// The samples of the tar `archive` from its members. A sample without an image or a label, or
// with a label that is not a non-negative integer, is a DataError naming the shard and the key
// under BadImagePolicy::Error, left out and listed in `skipped` under Skip.
ShardIndex index_shard(const std::vector<TarMember>& members, const ReadAt& read_at, int64_t archive_size,
                       const std::string& archive, BadImagePolicy policy);

// The index as text: a first line "dptrain-shard-index 1 <archive bytes> <samples>", then one line
// per sample, "<offset> <size> <label> <key>.<image extension>".
std::string format_shard_index(const ShardIndex& index);
// Reads what format_shard_index wrote; DataError naming `name` for anything else.
ShardIndex parse_shard_index(const std::string& text, const std::string& name);

}  // namespace dpt::data
