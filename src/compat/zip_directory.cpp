#include "zip_directory.h"

#include <algorithm>

#include <c10/util/Exception.h>

#include "little_endian.h"

namespace dpt::compat {
namespace {

constexpr uint32_t kEndOfDirectory = 0x06054b50;
constexpr uint32_t kZip64Locator = 0x07064b50;
constexpr uint32_t kZip64EndOfDirectory = 0x06064b50;
constexpr uint32_t kDirectoryEntry = 0x02014b50;
constexpr size_t kEndOfDirectorySize = 22, kZip64LocatorSize = 20, kZip64EndOfDirectorySize = 56;
constexpr size_t kDirectoryEntrySize = 46, kMaxCommentSize = 0xffff;
constexpr uint64_t kSizeInZip64 = 0xffffffff;  // a 32-bit size field saying "see the zip64 extra field"
constexpr uint16_t kZip64ExtraField = 0x0001;
constexpr uint16_t kStored = 0;
// Deflate's largest expansion: 1032 bytes out of every byte in, and a little for the stream's end.
constexpr uint64_t kDeflateExpansion = 1032, kDeflateSlack = 1024;

// The end-of-directory record's offset: the last of its signature within a comment's length of
// the end, as readers look for it; `size` when there is none.
size_t find_end_of_directory(const uint8_t* data, size_t size) {
  if (size < kEndOfDirectorySize) return size;
  const size_t lowest = size - kEndOfDirectorySize > kMaxCommentSize ? size - kEndOfDirectorySize - kMaxCommentSize : 0;
  for (size_t at = size - kEndOfDirectorySize + 1; at-- > lowest;) {
    if (little_endian(data + at, 4) == kEndOfDirectory) return at;
  }
  return size;
}

struct Directory {
  uint64_t offset = 0;
  uint64_t entries = 0;
};

Directory directory_of(const uint8_t* data, size_t size, size_t end) {
  Directory directory{little_endian(data + end + 16, 4), little_endian(data + end + 10, 2)};
  if (end < kZip64LocatorSize || little_endian(data + end - kZip64LocatorSize, 4) != kZip64Locator) return directory;
  const uint64_t record = little_endian(data + end - kZip64LocatorSize + 8, 8);
  TORCH_CHECK(record <= size - kZip64EndOfDirectorySize && little_endian(data + record, 4) == kZip64EndOfDirectory,
              "the archive's zip64 end-of-directory record is not where its locator says (byte ", record, " of ", size,
              ")");
  return Directory{little_endian(data + record + 48, 8), little_endian(data + record + 32, 8)};
}

}  // namespace

void check_zip_entry_sizes(const uint8_t* data, size_t size) {
  const size_t end = find_end_of_directory(data, size);
  if (end == size) return;
  const Directory directory = directory_of(data, size, end);
  uint64_t at = directory.offset;
  for (uint64_t entry = 0; entry < directory.entries; ++entry) {
    TORCH_CHECK(at <= size && size - at >= kDirectoryEntrySize && little_endian(data + at, 4) == kDirectoryEntry,
                "the archive's directory entry ", entry, " of ", directory.entries, " is not at byte ", at,
                " of ", size);
    const uint8_t* header = data + at;
    const uint64_t method = little_endian(header + 10, 2);
    uint64_t compressed = little_endian(header + 20, 4), uncompressed = little_endian(header + 24, 4);
    const uint64_t name = little_endian(header + 28, 2), extra = little_endian(header + 30, 2);
    const uint64_t comment = little_endian(header + 32, 2);
    TORCH_CHECK(size - at - kDirectoryEntrySize >= name + extra + comment, "the archive's directory entry ", entry,
                " runs past its end");
    // Sizes too large for 32 bits are in the zip64 extra field, uncompressed first, each only
    // where its 32-bit field says so.
    const size_t extra_begin = kDirectoryEntrySize + name, extra_end = extra_begin + extra;
    for (size_t field = extra_begin; field <= extra_end && extra_end - field >= 4;) {
      const size_t length = little_endian(header + field + 2, 2);
      if (little_endian(header + field, 2) == kZip64ExtraField) {
        size_t value = field + 4;
        const size_t value_end = std::min(value + length, extra_end);
        if (uncompressed == kSizeInZip64 && value_end - value >= 8) {
          uncompressed = little_endian(header + value, 8);
          value += 8;
        }
        if (compressed == kSizeInZip64 && value_end - value >= 8) compressed = little_endian(header + value, 8);
        break;
      }
      field += 4 + length;
    }
    const uint64_t largest = method == kStored ? compressed : compressed * kDeflateExpansion + kDeflateSlack;
    TORCH_CHECK(compressed <= size && uncompressed <= largest, "the archive's entry ", entry, " of ",
                directory.entries, " claims ", uncompressed, " bytes (", compressed, " stored); an archive of ", size,
                " bytes cannot hold them");
    at += kDirectoryEntrySize + name + extra + comment;
  }
}

}  // namespace dpt::compat
