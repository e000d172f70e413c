#include "dptrain/data/shard_index.h"

#include <algorithm>
#include <cctype>
#include <optional>
#include <sstream>
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

ShardIndex parse_shard_index(const std::string& text, const std::string& name) {
  std::istringstream in(text);
  std::string magic;
  int version = 0;
  int64_t count = -1;
  ShardIndex index;
  in >> magic >> version >> index.archive_size >> count;
  DPT_CHECK(in && magic == "dptrain-shard-index" && version == 1 && count >= 0, DataError, "shard index ", name,
            " is not a dptrain shard index (version 1); delete it and it is built again from its shard");
  std::string line;
  std::getline(in, line);  // the rest of the first line
  index.samples.reserve(static_cast<size_t>(std::min<int64_t>(count, 1 << 24)));
  for (int64_t i = 0; i < count; ++i) {
    ShardSample s;
    std::getline(in, line);
    std::istringstream fields(line);
    fields >> s.offset >> s.size >> s.label;
    std::string member;
    std::getline(fields >> std::ws, member);  // the rest: a key may hold spaces
    std::tie(s.key, s.image) = key_and_extension(member);
    DPT_CHECK(in && fields && !s.key.empty() && !s.image.empty() && s.offset >= 0 && s.size >= 0 && s.label >= 0 &&
                  s.offset + s.size <= index.archive_size,
              DataError, "shard index ", name, " is damaged at sample ", i, " of ", count,
              "; delete it and it is built again from its shard");
    index.samples.push_back(std::move(s));
  }
  return index;
}

}  // namespace dpt::data
