#include <gtest/gtest.h>

#include <cstring>
#include <string>
#include <vector>

#include <torch/torch.h>

#include "compat/zip_directory.h"
#include "dptrain/compat/pickle.h"

using dpt::compat::check_zip_entry_sizes;

namespace {

void put(std::vector<uint8_t>& bytes, size_t at, uint64_t value, int width) {
  for (int i = 0; i < width; ++i) bytes[at + i] = static_cast<uint8_t>(value >> (8 * i));
}

void append(std::vector<uint8_t>& bytes, uint64_t value, int width) {
  bytes.resize(bytes.size() + width);
  put(bytes, bytes.size() - width, value, width);
}

// The offsets of the central directory's entries ("PK\1\2").
std::vector<size_t> directory_entries(const std::vector<uint8_t>& bytes) {
  std::vector<size_t> found;
  for (size_t at = 0; at + 4 <= bytes.size(); ++at) {
    if (std::memcmp(bytes.data() + at, "PK\x01\x02", 4) == 0) found.push_back(at);
  }
  return found;
}

std::string refusal(const std::vector<uint8_t>& bytes) {
  try {
    check_zip_entry_sizes(bytes.data(), bytes.size());
  } catch (const c10::Error& e) {
    return e.what_without_backtrace();
  }
  return "accepted";
}

// `padding` bytes, then a directory of one stored entry whose 32-bit sizes say "zip64" and whose
// zip64 extra field gives `size` for both, then the end-of-directory record.
std::vector<uint8_t> zip64_archive(size_t padding, uint64_t size) {
  std::vector<uint8_t> bytes(padding, 0);
  const size_t directory = bytes.size();
  append(bytes, 0x02014b50, 4);
  append(bytes, 45, 2), append(bytes, 45, 2), append(bytes, 0, 2), append(bytes, 0, 2);  // versions, flags, stored
  append(bytes, 0, 4), append(bytes, 0, 4);                                               // time and date, crc
  append(bytes, 0xffffffff, 4), append(bytes, 0xffffffff, 4);                             // sizes: see zip64
  append(bytes, 1, 2), append(bytes, 20, 2), append(bytes, 0, 2);                         // name, extra, comment
  append(bytes, 0, 2), append(bytes, 0, 2), append(bytes, 0, 4), append(bytes, 0, 4);    // disk, attributes, offset
  bytes.push_back('x');
  append(bytes, 0x0001, 2), append(bytes, 16, 2), append(bytes, size, 8), append(bytes, size, 8);
  const size_t directory_size = bytes.size() - directory;
  append(bytes, 0x06054b50, 4);
  append(bytes, 0, 2), append(bytes, 0, 2), append(bytes, 1, 2), append(bytes, 1, 2);
  append(bytes, directory_size, 4), append(bytes, directory, 4), append(bytes, 0, 2);
  return bytes;
}

}  // namespace

// What fuzz/checkpoint found: a checkpoint whose directory claims 4294967295 bytes for a tensor's
// storage made LibTorch allocate them before reading. Every entry's claim is now held to what the
// archive can hold; real archives (a state dict as torch.save writes it) pass.
TEST(ZipDirectory, EntriesClaimingMoreThanTheArchiveHoldsAreRefused) {
  c10::impl::GenericDict state(c10::StringType::get(), c10::AnyType::get());
  state.insert("weights", torch::arange(64, torch::kFloat));
  const std::vector<char> saved = dpt::compat::pickle_save(state);
  const std::vector<uint8_t> archive(saved.begin(), saved.end());
  EXPECT_EQ(refusal(archive), "accepted");
  const std::vector<size_t> entries = directory_entries(archive);
  ASSERT_GE(entries.size(), 3u) << "data.pkl, the storage, the version";

  for (size_t entry = 0; entry < entries.size(); ++entry) {
    std::vector<uint8_t> claiming = archive;
    put(claiming, entries[entry] + 24, 0xffffffff, 4);  // the uncompressed size
    EXPECT_NE(refusal(claiming).find("entry " + std::to_string(entry) + " of " + std::to_string(entries.size()) +
                                     " claims 4294967295 bytes"),
              std::string::npos)
        << refusal(claiming);
    try {  // refused by the check, before LibTorch's reader allocated anything
      dpt::compat::pickle_load(std::vector<char>(claiming.begin(), claiming.end()));
      ADD_FAILURE() << "entry " << entry << " claiming 4 GB was read";
    } catch (const c10::Error& e) {
      EXPECT_NE(std::string(e.what()).find("claims 4294967295 bytes"), std::string::npos) << e.what();
    }
  }
  std::vector<uint8_t> stored_grown = archive;  // a stored entry's sizes must agree
  put(stored_grown, entries.back() + 24, archive.size() / 2, 4);
  EXPECT_NE(refusal(stored_grown).find("cannot hold them"), std::string::npos);

  std::vector<uint8_t> entry_lost = archive;  // the directory's first entry is not where it says
  put(entry_lost, entries.front(), 0x03014b50, 4);
  EXPECT_NE(refusal(entry_lost).find("entry 0 of " + std::to_string(entries.size()) + " is not at byte"),
            std::string::npos)
      << refusal(entry_lost);
  EXPECT_EQ(refusal(std::vector<uint8_t>(100, 0x5a)), "accepted") << "no end record: the reader refuses it";
}

TEST(ZipDirectory, Zip64SizesAreReadFromTheExtraField) {
  EXPECT_EQ(refusal(zip64_archive(200, 150)), "accepted");
  EXPECT_NE(refusal(zip64_archive(200, uint64_t{1} << 40)).find("claims 1099511627776 bytes"), std::string::npos)
      << refusal(zip64_archive(200, uint64_t{1} << 40));
}
