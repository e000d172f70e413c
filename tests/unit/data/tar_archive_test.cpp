#include "dptrain/data/tar_archive.h"

#include <gtest/gtest.h>

#include <cstring>
#include <string>
#include <vector>

#include "dptrain/common/error.h"
#include "dptrain/data/shard_index.h"
#include "support/error_of.h"
#include "support/python_oracle.h"

using dpt::data::BadImagePolicy;
using dpt::data::ReadAt;
using dpt::data::TarMember;
using dpt::data::TarWriter;

namespace {

std::string archive_of(const std::vector<std::pair<std::string, std::string>>& members) {
  std::string bytes;
  TarWriter tar([&](const char* data, size_t size) { bytes.append(data, size); });
  for (const auto& [name, contents] : members) tar.add(name, contents);
  tar.finish();
  EXPECT_EQ(tar.size(), static_cast<int64_t>(bytes.size()));
  return bytes;
}

ReadAt reader_of(const std::string& bytes) {
  return [&bytes](int64_t offset, int64_t size, char* out) {
    const int64_t n = std::max<int64_t>(0, std::min<int64_t>(size, static_cast<int64_t>(bytes.size()) - offset));
    std::memcpy(out, bytes.data() + offset, static_cast<size_t>(n));
    return n;
  };
}

std::vector<TarMember> scan(const std::string& bytes) {
  return dpt::data::scan_tar(reader_of(bytes), static_cast<int64_t>(bytes.size()), "test.tar");
}

dpt::data::ShardIndex index_of(const std::string& bytes, BadImagePolicy policy = BadImagePolicy::Error) {
  return dpt::data::index_shard(scan(bytes), reader_of(bytes), static_cast<int64_t>(bytes.size()), "test.tar", policy);
}

// The bytes of `python`'s stdout, which it writes as hex.
std::string python_bytes(const std::string& python) {
  const auto out = dpt::testing::run_python(python);
  if (!out) return {};
  std::string bytes;
  for (size_t i = 0; i + 1 < out->size(); i += 2) {
    bytes.push_back(static_cast<char>(std::stoi(out->substr(i, 2), nullptr, 16)));
  }
  return bytes;
}

}  // namespace

TEST(TarArchive, WrittenMembersScanBackWithTheirBytes) {
  const std::string bytes = archive_of({{"a/000001.jpg", std::string(700, 'x')}, {"a/000001.cls", "3"}, {"e", ""}});
  EXPECT_EQ(bytes.size() % 512, 0u);
  const auto members = scan(bytes);
  ASSERT_EQ(members.size(), 3u);
  EXPECT_EQ(members[0].name, "a/000001.jpg");
  EXPECT_EQ(members[0].offset, 512);
  EXPECT_EQ(bytes.substr(members[0].offset, members[0].size), std::string(700, 'x'));
  EXPECT_EQ(members[1].offset, 512 + 1024 + 512);
  EXPECT_EQ(bytes.substr(members[1].offset, members[1].size), "3");
  EXPECT_EQ(members[2].size, 0);
  // Nothing of the machine or the moment goes in: the same members give the same bytes.
  EXPECT_EQ(archive_of({{"a/000001.jpg", std::string(700, 'x')}, {"a/000001.cls", "3"}, {"e", ""}}), bytes);
}

// What Python's tarfile reads of our archive, and what we read of the archives it and GNU tar
// write (long names, pax headers, directories).
TEST(TarArchive, ReadsAndIsReadByPythonsTarfile) {
  const std::string ours = archive_of({{"k1.jpg", "jpeg bytes"}, {"k1.cls", "7"}});
  std::string hex;
  for (unsigned char c : ours) hex += "0123456789abcdef"[c >> 4], hex += "0123456789abcdef"[c & 15];
  const auto listed = dpt::testing::run_python(
      "import io, tarfile\n"
      "t = tarfile.open(fileobj=io.BytesIO(bytes.fromhex('" + hex + "')))\n"
      "print(';'.join(f'{m.name}={t.extractfile(m).read().decode()}:{m.mode:o}:{m.mtime}:{m.uid}' for m in t))");
  if (!listed) DPT_MISSING_DEPENDENCY(dpt::testing::oracle_missing("tarfile"));
  EXPECT_EQ(*listed, "k1.jpg=jpeg bytes:644:0:0;k1.cls=7:644:0:0\n");

  for (const char* format : {"GNU_FORMAT", "PAX_FORMAT", "USTAR_FORMAT"}) {
    SCOPED_TRACE(format);
    const std::string long_dir = std::string(format) == "USTAR_FORMAT" ? "d" : std::string(120, 'd');
    const std::string theirs = python_bytes(
        "import io, tarfile, sys\n"
        "b = io.BytesIO()\n"
        "with tarfile.open(fileobj=b, mode='w', format=tarfile." + std::string(format) + ") as t:\n"
        "    d = tarfile.TarInfo('" + long_dir + "'); d.type = tarfile.DIRTYPE; t.addfile(d)\n"
        "    for name, data in [('" + long_dir + "/s1.jpg', b'abc'), ('" + long_dir + "/s1.cls', b'12\\n')]:\n"
        "        i = tarfile.TarInfo(name); i.size = len(data); t.addfile(i, io.BytesIO(data))\n"
        "print(b.getvalue().hex())");
    const auto index = index_of(theirs);
    ASSERT_EQ(index.samples.size(), 1u);
    EXPECT_EQ(index.samples[0].key, long_dir + "/s1");
    EXPECT_EQ(index.samples[0].label, 12);
    EXPECT_EQ(theirs.substr(index.samples[0].offset, index.samples[0].size), "abc");
  }
}

TEST(TarArchive, DamageIsADataErrorNamingTheArchiveAndMember) {
  const std::string whole = archive_of({{"s1.jpg", std::string(2000, 'x')}, {"s1.cls", "1"}});
  const std::string cut = whole.substr(0, 1024);  // a download stopped inside the image
  const std::string error = dpt::testing::error_of<dpt::DataError>([&] { scan(cut); });
  EXPECT_NE(error.find("shard test.tar is truncated: member s1.jpg has 2000 bytes from byte 512 but the archive "
                       "ends at byte 1024"), std::string::npos) << error;
  std::string damaged = whole;
  damaged[3] = 'X';  // in the first header's name: its checksum no longer holds
  EXPECT_NE(dpt::testing::error_of<dpt::DataError>([&] { scan(damaged); }).find("wrong checksum"), std::string::npos);
  EXPECT_NE(dpt::testing::error_of<dpt::DataError>([&] { scan(std::string(1000, 'z')); }).find("not a tar archive"),
            std::string::npos);
}

TEST(ShardIndex, SamplesAreMembersSharingAKey) {
  const std::string bytes = archive_of({{"a.jpg", "A"}, {"a.cls", "0"}, {"a.json", "{}"},
                                        {"b.seg.png", "B"}, {"b.cls", " 41\n"}});
  const auto index = index_of(bytes);
  ASSERT_EQ(index.samples.size(), 2u);
  EXPECT_EQ(index.samples[1].key, "b");
  EXPECT_EQ(index.samples[1].image, "seg.png");
  EXPECT_EQ(index.samples[1].label, 41);
  const auto again = dpt::data::parse_shard_index(dpt::data::format_shard_index(index), "test.idx");
  ASSERT_EQ(again.samples.size(), 2u);
  EXPECT_EQ(again.archive_size, index.archive_size);
  EXPECT_EQ(again.samples[1].offset, index.samples[1].offset);
  EXPECT_EQ(again.samples[1].image, "seg.png");
  EXPECT_NE(dpt::testing::error_of<dpt::DataError>([&] { dpt::data::parse_shard_index("12 3\n", "x.idx"); })
                .find("shard index x.idx is not a dptrain shard index"),
            std::string::npos);
}

// Every field of a line is checked: a line cut short, a negative or non-numeric field, a member
// past the shard's end or a missing line is named with its sample; a key may hold spaces.
TEST(ShardIndex, ADamagedIndexNamesItsSample) {
  const std::string header = "dptrain-shard-index 1 4096 2\n";
  const auto index = dpt::data::parse_shard_index(header + "512 3 7 my key.jpg\n1536 5 8 b.png", "ok.idx");
  ASSERT_EQ(index.samples.size(), 2u);
  EXPECT_EQ(index.samples[0].key, "my key");
  EXPECT_EQ(index.samples[1].offset, 1536);
  EXPECT_EQ(index.samples[1].size, 5);
  EXPECT_EQ(index.samples[1].label, 8);
  for (const std::string second : {"1536 5 x b.png", "1536 5", "1536 -5 8 b.png", "4000 500 8 b.png", "1536 5 8 b",
                                   ""}) {
    const std::string text = header + "512 3 7 a.jpg\n" + second;
    const std::string error =
        dpt::testing::error_of<dpt::DataError>([&] { dpt::data::parse_shard_index(text, "x.idx"); });
    EXPECT_NE(error.find("shard index x.idx is damaged at sample 1 of 2"), std::string::npos)
        << second << ": " << error;
  }
  EXPECT_NE(dpt::testing::error_of<dpt::DataError>(
                [&] { dpt::data::parse_shard_index("dptrain-shard-index 1 4096 2 extra\n", "x.idx"); })
                .find("is not a dptrain shard index"),
            std::string::npos);
}

// The packed form a set keeps gives back every field, and refuses what would not fit it.
TEST(ShardIndex, PackedIndexKeepsEveryField) {
  dpt::data::ShardIndex index;
  index.archive_size = int64_t{6} << 30;
  index.samples = {{"n01440764_10026", "JPEG", int64_t{5} << 30, 110000, 999}, {"a b", "png", 512, 0, 0}};
  const dpt::data::PackedShardIndex packed(index, "big.tar");
  ASSERT_EQ(packed.size(), 2u);
  EXPECT_EQ(packed.offset(0), int64_t{5} << 30);  // past 4 GiB
  EXPECT_EQ(packed.bytes(0), 110000);
  EXPECT_EQ(packed.label(0), 999);
  EXPECT_EQ(packed.member(0), "n01440764_10026.JPEG");
  EXPECT_EQ(packed.member(1), "a b.png");
  EXPECT_EQ(packed.bytes(1), 0);
  index.samples[1].size = int64_t{1} << 32;
  EXPECT_NE(dpt::testing::error_of<dpt::DataError>([&] { dpt::data::PackedShardIndex(index, "big.tar"); })
                .find("shard big.tar: image member a b.png has 4294967296 bytes"),
            std::string::npos);
  index.samples[1].size = 1;
  index.samples[1].label = int64_t{1} << 31;
  EXPECT_NE(dpt::testing::error_of<dpt::DataError>([&] { dpt::data::PackedShardIndex(index, "big.tar"); })
                .find("sample a b has label 2147483648"),
            std::string::npos);
}

TEST(ShardIndex, ABadSampleFailsOrIsCountedUnderSkip) {
  const std::string no_label = archive_of({{"a.jpg", "A"}, {"b.jpg", "B"}, {"b.cls", "1"}});
  EXPECT_EQ(dpt::testing::error_of<dpt::DataError>([&] { index_of(no_label); }),
            "shard test.tar: sample a is left out: its image a.jpg has no label member (a.cls) (fix the shard, or "
            "pass --bad-images skip to leave such samples out)");
  const auto skipped = index_of(no_label, BadImagePolicy::Skip);
  ASSERT_EQ(skipped.samples.size(), 1u);
  EXPECT_EQ(skipped.samples[0].key, "b");
  ASSERT_EQ(skipped.skipped.size(), 1u);
  const std::string not_image = archive_of({{"a.txt", "hello"}, {"a.cls", "1"}});
  EXPECT_NE(dpt::testing::error_of<dpt::DataError>([&] { index_of(not_image); })
                .find("sample a is left out: it has no image member (.jpg, .jpeg or .png)"),
            std::string::npos);
  const std::string bad_label = archive_of({{"a.jpg", "A"}, {"a.cls", "cat"}});
  EXPECT_NE(dpt::testing::error_of<dpt::DataError>([&] { index_of(bad_label); })
                .find("its label member a.cls holds 'cat', not a class index"),
            std::string::npos);
}
