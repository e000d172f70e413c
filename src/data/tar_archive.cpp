#include "dptrain/data/tar_archive.h"

#include <algorithm>
#include <array>
#include <cstring>
#include <optional>
#include <utility>

#include "dptrain/common/error.h"

namespace dpt::data {

namespace {

constexpr int64_t kBlock = 512;

int64_t padded(int64_t size) { return (size + kBlock - 1) / kBlock * kBlock; }

// The fields of a header block that the scan and the writer use, at their ustar offsets.
struct Field {
  size_t offset, length;
};
constexpr Field kName{0, 100}, kMode{100, 8}, kUid{108, 8}, kGid{116, 8}, kSize{124, 12}, kTime{136, 12},
    kChecksum{148, 8}, kType{156, 1}, kMagic{257, 6}, kVersion{263, 2}, kPrefix{345, 155};

using Block = std::array<char, kBlock>;

std::string text_of(const Block& block, Field field) {
  const char* begin = block.data() + field.offset;
  return std::string(begin, strnlen(begin, field.length));
}

// An octal number as tar writes it (spaces or NULs around the digits), or GNU's base-256 form
// (first byte's high bit set) for sizes past 8 GiB; nullopt for anything else.
std::optional<int64_t> number_of(const Block& block, Field field) {
  const auto* bytes = reinterpret_cast<const unsigned char*>(block.data() + field.offset);
  if (bytes[0] & 0x80) {
    int64_t value = bytes[0] & 0x7f;
    for (size_t i = 1; i < field.length; ++i) {
      if (value > (INT64_MAX >> 8)) return std::nullopt;
      value = (value << 8) | bytes[i];
    }
    return value;
  }
  size_t i = 0;
  while (i < field.length && bytes[i] == ' ') ++i;
  int64_t value = 0;
  bool digits = false;
  for (; i < field.length && bytes[i] >= '0' && bytes[i] <= '7'; ++i, digits = true) {
    if (value > (INT64_MAX >> 3)) return std::nullopt;
    value = value * 8 + (bytes[i] - '0');
  }
  for (; i < field.length; ++i) {
    if (bytes[i] != ' ' && bytes[i] != '\0') return std::nullopt;
  }
  if (!digits) return std::nullopt;
  return value;
}

// The sum of the header's bytes with its checksum field read as spaces (unsigned, as POSIX says;
// old tars summed signed bytes, which Python's tarfile and GNU tar also accept).
std::pair<int64_t, int64_t> checksums(const Block& block) {
  int64_t unsigned_sum = 0, signed_sum = 0;
  for (size_t i = 0; i < block.size(); ++i) {
    const bool in_field = i >= kChecksum.offset && i < kChecksum.offset + kChecksum.length;
    const char c = in_field ? ' ' : block[i];
    unsigned_sum += static_cast<unsigned char>(c);
    signed_sum += static_cast<signed char>(c);
  }
  return {unsigned_sum, signed_sum};
}

// The value of the "path" record of a pax extended header's contents ("<length> path=<value>\n"
// records), or "" without one.
std::string pax_path(const std::string& records) {
  size_t at = 0;
  while (at < records.size()) {
    const size_t space = records.find(' ', at);
    if (space == std::string::npos) break;
    const int64_t length = std::atoll(records.c_str() + at);
    if (length <= 0 || at + static_cast<size_t>(length) > records.size()) break;
    const std::string record = records.substr(space + 1, at + length - space - 2);  // no '\n'
    if (record.rfind("path=", 0) == 0) return record.substr(5);
    at += static_cast<size_t>(length);
  }
  return "";
}

void put_text(Block& block, Field field, const std::string& text) {
  std::memcpy(block.data() + field.offset, text.data(), std::min(text.size(), field.length));
}

void put_octal(Block& block, Field field, int64_t value) {
  // length - 1 digits and a NUL, as GNU tar and Python's tarfile write them.
  std::string digits(field.length - 1, '0');
  for (size_t i = digits.size(); i-- > 0 && value > 0; value /= 8) digits[i] = static_cast<char>('0' + value % 8);
  put_text(block, field, digits);
}

}  // namespace

std::vector<TarMember> scan_tar(const ReadAt& read_at, int64_t archive_size, const std::string& archive) {
  std::vector<TarMember> members;
  std::string long_name;  // from a GNU 'L' member or a pax 'x' header, for the member that follows
  std::string last = "(none yet)";
  Block block;
  int64_t at = 0;
  auto read_contents = [&](int64_t offset, int64_t size, const std::string& what) {
    std::string contents(static_cast<size_t>(size), '\0');
    DPT_CHECK(read_at(offset, size, contents.data()) == size, DataError, "shard ", archive, " is truncated: ",
              what, " ends past its last byte");
    return contents;
  };
  while (at + kBlock <= archive_size) {
    DPT_CHECK(read_at(at, kBlock, block.data()) == kBlock, DataError, "shard ", archive,
              " could not be read at byte ", at, " (after member ", last, ")");
    if (std::all_of(block.begin(), block.end(), [](char c) { return c == 0; })) return members;  // the end
    const auto [unsigned_sum, signed_sum] = checksums(block);
    const auto stored = number_of(block, kChecksum);
    DPT_CHECK(stored && (*stored == unsigned_sum || *stored == signed_sum), DataError, "shard ", archive,
              " is not a tar archive or is damaged: the header at byte ", at, " (after member ", last,
              ") has a wrong checksum");
    const auto size = number_of(block, kSize);
    DPT_CHECK(size && *size >= 0, DataError, "shard ", archive, ": the header at byte ", at, " has no valid size");
    std::string name = text_of(block, kName);
    const std::string prefix = text_of(block, kPrefix);
    if (text_of(block, kMagic) == "ustar" && !prefix.empty()) name = prefix + "/" + name;
    if (!long_name.empty()) name = std::exchange(long_name, "");
    const int64_t contents = at + kBlock;
    DPT_CHECK(contents + *size <= archive_size, DataError, "shard ", archive, " is truncated: member ", name, " has ",
              *size, " bytes from byte ", contents, " but the archive ends at byte ", archive_size);
    const char type = block[kType.offset];
    if (type == 'L') {
      long_name = read_contents(contents, *size, "a long name");
      long_name.resize(strnlen(long_name.c_str(), long_name.size()));
    } else if (type == 'x') {
      long_name = pax_path(read_contents(contents, *size, "a pax header"));
    } else if (type == '0' || type == '\0' || type == '7') {
      members.push_back({name, contents, *size});
      last = name;
    }
    at = contents + padded(*size);
  }
  // No end blocks: `tar` always writes them, but an archive cut at a member's end is otherwise whole.
  DPT_CHECK(at >= archive_size, DataError, "shard ", archive, " is truncated inside a header at byte ",
            at, " (after member ", last, ")");
  return members;
}

void TarWriter::write(const char* bytes, size_t size) {
  sink_(bytes, size);
  written_ += static_cast<int64_t>(size);
}

void TarWriter::add(const std::string& name, const char* bytes, size_t size) {
  DPT_CHECK(!name.empty() && name.size() <= kName.length, ConfigError, "tar member name '", name,
            "' must have 1 to 100 bytes");
  Block header{};
  put_text(header, kName, name);
  put_octal(header, kMode, 0644);
  put_octal(header, kUid, 0);
  put_octal(header, kGid, 0);
  put_octal(header, kSize, static_cast<int64_t>(size));
  put_octal(header, kTime, 0);
  header[kType.offset] = '0';
  put_text(header, kMagic, std::string("ustar\0", 6));
  put_text(header, kVersion, "00");
  // The checksum: six octal digits, a NUL and a space.
  Block for_sum = header;
  std::string digits(6, '0');
  int64_t sum = checksums(for_sum).first;
  for (size_t i = digits.size(); i-- > 0 && sum > 0; sum /= 8) digits[i] = static_cast<char>('0' + sum % 8);
  put_text(header, kChecksum, digits + std::string("\0 ", 2));
  write(header.data(), header.size());
  write(bytes, size);
  const Block zeros{};
  write(zeros.data(), static_cast<size_t>(padded(static_cast<int64_t>(size)) - static_cast<int64_t>(size)));
}

void TarWriter::finish() {
  const Block zeros{};
  write(zeros.data(), zeros.size());
  write(zeros.data(), zeros.size());
}

}  // namespace dpt::data
