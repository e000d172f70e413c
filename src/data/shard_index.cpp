#include "dptrain/data/shard_index.h"

#include <algorithm>
#include <cctype>
#include <charconv>
#include <limits>
#include <optional>
#include <sstream>
#include <string_view>
#include <tuple>

#include "dptrain/common/error.h"
#include "dptrain/common/text.h"

namespace dpt::data {

namespace {

// WebDataset's split of a member's path into the sample's key and the field's extension: the
// extension starts at the first dot of the file name.
std::pair<std::string, std::string> key_and_extension(const std::string& name) {
  const size_t slash = name.rfind('/');
  const size_t dot = name.find('.', slash == std::string::npos ? 0 : slash + 1);
  if (dot == std::string::npos) return {name, ""};
  return {name.substr(0, dot), name.substr(dot + 1)};
}

bool is_image_extension(const std::string& extension) {
  const std::string last = ascii_lower(extension.substr(extension.rfind('.') + 1));
  return last == "jpg" || last == "jpeg" || last == "png";
}

// A label's text as a class index: decimal digits with optional surrounding white space.
std::optional<int64_t> parse_label(const std::string& text) {
  size_t begin = 0, end = text.size();
  while (begin < end && std::isspace(static_cast<unsigned char>(text[begin]))) ++begin;
  while (end > begin && std::isspace(static_cast<unsigned char>(text[end - 1]))) --end;
  if (begin == end || end - begin > 18) return std::nullopt;
  int64_t value = 0;
  for (size_t i = begin; i < end; ++i) {
    if (!std::isdigit(static_cast<unsigned char>(text[i]))) return std::nullopt;
    value = value * 10 + (text[i] - '0');
  }
  return value;
}

}  // namespace

ShardIndex index_shard(const std::vector<TarMember>& members, const ReadAt& read_at, int64_t archive_size,
                       const std::string& archive, BadImagePolicy policy) {
  ShardIndex index;
  index.archive_size = archive_size;
  // Members of one sample follow each other; a sample ends where the key changes.
  for (size_t first = 0; first < members.size();) {
    const std::string key = key_and_extension(members[first].name).first;
    size_t end = first;
    const TarMember* image = nullptr;
    std::string image_extension, problem;
    std::optional<int64_t> label;
    for (; end < members.size() && key_and_extension(members[end].name).first == key; ++end) {
      const auto& [_, extension] = key_and_extension(members[end].name);
      if (is_image_extension(extension) && image == nullptr) {
        image = &members[end];
        image_extension = extension;
      } else if (extension == "cls") {
        DPT_CHECK(members[end].size <= 64, DataError, "shard ", archive, ": label member ", members[end].name,
                  " has ", members[end].size, " bytes; a .cls member holds a class index");
        std::string text(static_cast<size_t>(members[end].size), '\0');
        DPT_CHECK(read_at(members[end].offset, members[end].size, text.data()) == members[end].size, DataError,
                  "shard ", archive, " is truncated inside member ", members[end].name);
        label = parse_label(text);
        if (!label) problem = str("its label member ", members[end].name, " holds '", text, "', not a class index");
      }
    }
    if (problem.empty() && image == nullptr) {
      problem = "it has no image member (.jpg, .jpeg or .png)";
    } else if (problem.empty() && !label) {
      problem = str("its image ", image->name, " has no label member (", key, ".cls)");
    }
    if (problem.empty()) {
      index.samples.push_back({key, image_extension, image->offset, image->size, *label});
    } else {
      const std::string message = str("shard ", archive, ": sample ", key, " is left out: ", problem);
      DPT_CHECK(policy == BadImagePolicy::Skip, DataError, message,
                " (fix the shard, or pass --bad-images skip to leave such samples out)");
      index.skipped.push_back(message);
    }
    first = end;
  }
  return index;
}

std::string format_shard_index(const ShardIndex& index) {
  std::ostringstream out;
  out << "dptrain-shard-index 1 " << index.archive_size << " " << index.samples.size() << "\n";
  for (const ShardSample& s : index.samples) {
    out << s.offset << " " << s.size << " " << s.label << " " << s.key << "." << s.image << "\n";
  }
  return out.str();
}

namespace {

// The next line of `text` from `at` on, without its newline; `at` moves past it.
std::string_view next_line(std::string_view text, size_t& at) {
  const size_t end = std::min(text.find('\n', at), text.size());
  const std::string_view line = text.substr(at, end - at);
  at = end + 1;
  return line;
}

// A decimal integer at the start of `field`, which then starts after it and the spaces that follow.
bool take_number(std::string_view& field, int64_t& value) {
  const auto [end, error] = std::from_chars(field.data(), field.data() + field.size(), value);
  if (error != std::errc() || end == field.data()) return false;
  field.remove_prefix(static_cast<size_t>(end - field.data()));
  const size_t text = field.find_first_not_of(' ');
  field.remove_prefix(text == std::string_view::npos ? field.size() : text);
  return true;
}

}  // namespace

// Read line by line through string views: the indexes of an ImageNet-sized set hold 1.28 M lines.
ShardIndex parse_shard_index(const std::string& text, const std::string& name) {
  auto damaged = [&](int64_t sample, int64_t count) {
    return DataError(str("shard index ", name, " is damaged at sample ", sample, " of ", count,
                         "; delete it and it is built again from its shard"));
  };
  size_t at = 0;
  std::string_view first = next_line(text, at);
  constexpr std::string_view kMagic = "dptrain-shard-index 1 ";
  int64_t count = -1;
  ShardIndex index;
  const bool header = first.substr(0, kMagic.size()) == kMagic &&
                      (first.remove_prefix(kMagic.size()), take_number(first, index.archive_size)) &&
                      take_number(first, count) && first.empty() && count >= 0;
  DPT_CHECK(header, DataError, "shard index ", name,
            " is not a dptrain shard index (version 1); delete it and it is built again from its shard");
  index.samples.reserve(static_cast<size_t>(std::min<int64_t>(count, 1 << 24)));
  for (int64_t i = 0; i < count; ++i) {
    if (at > text.size()) throw damaged(i, count);
    std::string_view fields = next_line(text, at);
    ShardSample s;
    if (!take_number(fields, s.offset) || !take_number(fields, s.size) || !take_number(fields, s.label)) {
      throw damaged(i, count);
    }
    std::tie(s.key, s.image) = key_and_extension(std::string(fields));  // the rest: a key may hold spaces
    if (s.key.empty() || s.image.empty() || s.offset < 0 || s.size < 0 || s.label < 0 ||
        s.offset + s.size > index.archive_size) {
      throw damaged(i, count);
    }
    index.samples.push_back(std::move(s));
  }
  return index;
}

int64_t PackedShardIndex::bytes_held() const {
  // Each array was reserved to its size.
  return static_cast<int64_t>(size() * (sizeof(offsets_[0]) + sizeof(sizes_[0]) + sizeof(labels_[0]) +
                                        sizeof(member_ends_[0])) +
                              members_.size());
}

PackedShardIndex::PackedShardIndex(const ShardIndex& index, const std::string& shard) {
  const size_t n = index.samples.size();
  offsets_.reserve(n);
  sizes_.reserve(n);
  labels_.reserve(n);
  member_ends_.reserve(n);
  size_t names = 0;
  for (const ShardSample& s : index.samples) names += s.key.size() + 1 + s.image.size();
  DPT_CHECK(names <= std::numeric_limits<uint32_t>::max(), DataError, "shard ", shard, "'s member names take ", names,
            " bytes, more than dptrain indexes in one shard (4 GiB): split it");
  members_.reserve(names);
  for (const ShardSample& s : index.samples) {
    DPT_CHECK(s.size <= std::numeric_limits<uint32_t>::max(), DataError, "shard ", shard, ": image member ", s.key,
              ".", s.image, " has ", s.size, " bytes, more than an image dptrain decodes (4 GiB)");
    DPT_CHECK(s.label <= std::numeric_limits<int32_t>::max(), DataError, "shard ", shard, ": sample ", s.key,
              " has label ", s.label, ", more than the classes dptrain counts (2^31)");
    offsets_.push_back(s.offset);
    sizes_.push_back(static_cast<uint32_t>(s.size));
    labels_.push_back(static_cast<int32_t>(s.label));
    members_.append(s.key).append(1, '.').append(s.image);
    member_ends_.push_back(static_cast<uint32_t>(members_.size()));
  }
}

std::string_view PackedShardIndex::member(size_t sample) const {
  const uint32_t begin = sample == 0 ? 0 : member_ends_[sample - 1];
  return std::string_view(members_).substr(begin, member_ends_[sample] - begin);
}

}  // namespace dpt::data
