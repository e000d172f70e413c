#include "dptrain/data/shard_set.h"

#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <map>
#include <numeric>
#include <set>

#include "dptrain/common/error.h"
#include "dptrain/common/read_file.h"
#include "dptrain/common/text.h"
#include "dptrain/data/cifar.h"
#include "dptrain/data/image_folder.h"
#include "dptrain/data/sampler.h"
#include "dptrain/data/shard_writer.h"
#include "support/error_of.h"
#include "support/nginx_server.h"
#include "support/python_oracle.h"
#include "support/temp_dir.h"
#include "support/test_images.h"
#include "support/wait_until.h"

using namespace dpt::data;
namespace fs = std::filesystem;

namespace {

// An ImageFolder of `per_class` JPEGs in each of three classes, of varied sizes and qualities.
std::string make_folder(const std::string& root, int per_class) {
  for (int c = 0; c < 3; ++c) {
    fs::create_directories(root + "/class" + std::to_string(c));
    for (int i = 0; i < per_class; ++i) {
      const auto image = dpt::testing::gradient_image(24 + 3 * i, 20 + c, i + c);
      const std::string path = root + "/class" + std::to_string(c) + "/" + std::to_string(i) + ".jpg";
      write_file(path, encode_jpeg(image, 70 + 3 * i));
    }
  }
  return root;
}

std::vector<SourceImage> sources_of(const ImageFolder& folder) {
  std::vector<SourceImage> images;
  for (int64_t i = 0; i < folder.size(); ++i) images.push_back({folder.path(i), folder.label(i), nullptr});
  return images;
}

Transform train_crop() {
  return Transform(TransformOptions().mode(TransformMode::Train).size(16).scale_min(0.3).seed(5));
}

std::string contents(const fs::path& path) { return *dpt::read_file<std::string>(path.string()); }

}  // namespace

// A remote set over a real HTTP server: the epoch said after the one being read has its first
// shards fetched once the reading epoch's are, before it begins, so that its first batches do not
// wait for the link. Said only as it begins (the negative control), they are not.
TEST(ShardSet, FetchesTheNextEpochsFirstShardsBeforeItBegins) {
  dpt::testing::TempDir dir;
  const ImageFolder folder(make_folder(dir.path() + "/src", 10), train_crop());
  write_shards(sources_of(folder), folder.classes(), dir.path() + "/www/set",
               ShardWriterOptions().order("folder").shard_bytes(5 << 10).prefix("train"));
  dpt::testing::NginxServer server(dir.path() + "/www");
  if (!server.started()) DPT_MISSING_DEPENDENCY(server.why());
  const auto remote = [&](const std::string& cache) {
    return std::make_unique<ShardSet>(server.url() + "/set", train_crop(), BadImagePolicy::Error,
                                      ShardCacheOptions(dir.path() + "/" + cache));
  };
  // Epoch 0 reads the first half of the shards; epoch 1 the second half, then the first.
  const auto sizes = remote("probe")->shard_sizes();
  ASSERT_GE(sizes.size(), 6u);
  const size_t half = sizes.size() / 2;
  std::vector<int64_t> epoch0, epoch1;
  for (size_t shard = 0, sample = 0; shard < sizes.size(); ++shard) {
    for (int64_t k = 0; k < sizes[shard]; ++k, ++sample) (shard < half ? epoch0 : epoch1).push_back(sample);
  }
  epoch1.insert(epoch1.end(), epoch0.begin(), epoch0.end());
  const auto read_epoch0 = [&](const ShardSet& set) {
    for (int64_t sample : epoch0) set.image_bytes(sample);
  };

  const auto ahead = remote("ahead");
  ahead->will_read(0, epoch0);
  ahead->will_read(1, epoch1);
  ahead->starts_reading(0);
  read_epoch0(*ahead);
  const ShardCache ahead_cache(ShardCacheOptions(dir.path() + "/ahead"));
  const auto& urls = ahead->shard_paths();
  EXPECT_TRUE(dpt::testing::wait_until([&] { return ahead_cache.holds(urls[half], -1); }, std::chrono::seconds(30)))
      << "epoch 1's first shard, " << urls[half];
  EXPECT_TRUE(dpt::testing::wait_until([&] { return ahead_cache.holds(urls.back(), -1); }, std::chrono::seconds(30)))
      << "epoch 1's last new shard, " << urls.back();

  const auto late = remote("late");
  late->will_read(0, epoch0);
  late->starts_reading(0);
  read_epoch0(*late);
  const ShardCache late_cache(ShardCacheOptions(dir.path() + "/late"));
  EXPECT_TRUE(dpt::testing::wait_until(
      [&] {
        for (size_t shard = 0; shard < half; ++shard) {
          if (!late_cache.holds(urls[shard], -1)) return false;
        }
        return true;
      },
      std::chrono::seconds(30)));
  for (size_t shard = half; shard < urls.size(); ++shard) EXPECT_FALSE(late_cache.holds(urls[shard], -1)) << shard;
}

// A remote set's prefetcher fetches fetch_streams shards at once, each over a connection of its
// own: with two, the server (at 8 KB/s a response: a second for each of the two shards) serves
// both requests at the same time; with one (the negative control), the second request begins
// after the first has ended.
TEST(ShardSet, FetchesAsManyShardsAtOnceAsItHasStreams) {
  dpt::testing::TempDir dir;
  const ImageFolder folder(make_folder(dir.path() + "/src", 2), train_crop());
  write_shards(sources_of(folder), folder.classes(), dir.path() + "/www/set",
               ShardWriterOptions().order("folder").shard_bytes(9 << 10).prefix("train"));
  dpt::testing::NginxServer server(dir.path() + "/www", "8k");
  if (!server.started()) DPT_MISSING_DEPENDENCY(server.why());
  const auto shard_requests = [&] {
    std::vector<dpt::testing::NginxServer::Request> shards;
    for (const auto& request : server.requests()) {
      if (dpt::ends_with(request.uri, ".tar")) shards.push_back(request);
    }
    return shards;
  };
  // The most two shard requests overlap, in seconds (negative: the least gap between two).
  const auto overlap_with_streams = [&](int streams) {
    const ShardSet set(server.url() + "/set", train_crop(), BadImagePolicy::Error,
                       ShardCacheOptions(dir.path() + "/cache" + std::to_string(streams)).fetch_streams(streams));
    std::vector<int64_t> all(static_cast<size_t>(set.size()));
    std::iota(all.begin(), all.end(), 0);
    const size_t before = shard_requests().size();
    set.will_read(0, all);
    set.starts_reading(0);
    const size_t count = set.shard_paths().size();
    EXPECT_TRUE(dpt::testing::wait_until([&] { return shard_requests().size() >= before + count; },
                                         std::chrono::seconds(60)));
    auto shards = shard_requests();
    shards.erase(shards.begin(), shards.begin() + static_cast<std::ptrdiff_t>(std::min(before, shards.size())));
    EXPECT_EQ(shards.size(), count);
    double overlap = -1e9;
    for (size_t a = 0; a < shards.size(); ++a) {
      for (size_t b = a + 1; b < shards.size(); ++b) {
        overlap = std::max(overlap, std::min(shards[a].ended, shards[b].ended) -
                                        std::max(shards[a].started, shards[b].started));
      }
    }
    return overlap;
  };
  ASSERT_GE(ShardSet(dir.path() + "/www/set", train_crop()).shard_sizes().size(), 2u);
  EXPECT_GT(overlap_with_streams(2), 0.5);
  EXPECT_LT(overlap_with_streams(1), 0.005);  // the log's times are to the millisecond
}

// Written in the folder's order, a shard set is the ImageFolder: the same labels, the same bytes,
// and with the same transform the same samples bit for bit, epoch after epoch.
TEST(ShardSet, InTheFoldersOrderEqualsTheImageFolderBitForBit) {
  dpt::testing::TempDir dir;
  const ImageFolder folder(make_folder(dir.path() + "/src", 7), train_crop());
  write_shards(sources_of(folder), folder.classes(), dir.path() + "/out",
               ShardWriterOptions().order("folder").shard_bytes(12000).prefix("train"));
  const ShardSet shards(dir.path() + "/out", train_crop());
  ASSERT_EQ(shards.size(), folder.size());
  EXPECT_EQ(shards.classes(), folder.classes());
  EXPECT_GT(shards.shard_sizes().size(), 2u);
  std::vector<float> a(folder.sample_numel()), b(folder.sample_numel());
  for (int64_t epoch : {0, 3}) {
    for (int64_t i = 0; i < folder.size(); ++i) {
      ASSERT_EQ(shards.get(i, epoch, a.data()), folder.get(i, epoch, b.data())) << i;
      ASSERT_EQ(a, b) << "sample " << i << " of epoch " << epoch;
      EXPECT_EQ(shards.image_bytes(i), read_file(folder.path(i)));
    }
  }
  EXPECT_EQ(shards.describe(shards.shard_sizes()[0]), dir.path() + "/out/train-000001.tar#" +
                                                           dpt::zero_padded(shards.shard_sizes()[0], 9) + ".jpg");
  // Its indexes hold 20 bytes a sample (offset, size, label, where its name ends) and the names.
  int64_t names = 0;
  for (int64_t i = 0; i < shards.size(); ++i) {
    const std::string described = shards.describe(i);
    names += static_cast<int64_t>(described.size() - described.find('#') - 1);
  }
  EXPECT_EQ(shards.index_bytes(), 20 * shards.size() + names);
}

// Shuffled, every shard mixes the classes and the set holds each image once; the same input
// gives the same bytes, and a run over an interrupted one keeps the shards already whole.
TEST(ShardSet, ShuffledWritesAreDeterministicAndResumable) {
  dpt::testing::TempDir dir;
  const ImageFolder folder(make_folder(dir.path() + "/src", 8), train_crop());
  auto options = ShardWriterOptions().seed(11).shard_bytes(20000).threads(2).prefix("t");
  const auto manifest = write_shards(sources_of(folder), folder.classes(), dir.path() + "/a", options);
  const ShardSet shards(dir.path() + "/a", train_crop());
  std::multiset<std::vector<uint8_t>> from_folder, from_shards;
  for (int64_t i = 0; i < folder.size(); ++i) {
    from_folder.insert(read_file(folder.path(i)));
    from_shards.insert(shards.image_bytes(i));
  }
  EXPECT_EQ(from_folder, from_shards);
  std::set<int64_t> first_shard_labels;
  for (int64_t i = 0; i < shards.shard_sizes()[0]; ++i) first_shard_labels.insert(shards.label(i));
  EXPECT_GT(first_shard_labels.size(), 1u);

  write_shards(sources_of(folder), folder.classes(), dir.path() + "/b", options.threads(1));
  for (const auto& shard : manifest.shards) {
    EXPECT_EQ(contents(dir.path() + "/a/" + shard.file), contents(dir.path() + "/b/" + shard.file)) << shard.file;
  }
  EXPECT_EQ(contents(dir.path() + "/a/manifest.json"), contents(dir.path() + "/b/manifest.json"));

  // An interrupted run: one shard never written, one cut short, the manifest missing.
  const fs::path kept = dir.path() + "/b/" + manifest.shards[0].file;
  fs::remove(dir.path() + "/b/" + manifest.shards[1].file);
  fs::resize_file(dir.path() + "/b/" + manifest.shards[2].file, 1024);
  fs::remove(dir.path() + "/b/manifest.json");
  const auto kept_time = fs::last_write_time(kept);
  write_shards(sources_of(folder), folder.classes(), dir.path() + "/b", options);
  EXPECT_EQ(fs::last_write_time(kept), kept_time);
  for (const auto& shard : manifest.shards) {
    EXPECT_EQ(contents(dir.path() + "/a/" + shard.file), contents(dir.path() + "/b/" + shard.file)) << shard.file;
  }
  EXPECT_EQ(contents(dir.path() + "/a/manifest.json"), contents(dir.path() + "/b/manifest.json"));
}

// --max-side: what is longer than the side is a JPEG that fits it, what fits keeps its bytes, and
// the set is as deterministic as one of copies, whatever the threads.
TEST(ShardSet, MaxSideFitsTheLargerImagesAndKeepsTheOthers) {
  dpt::testing::TempDir dir;
  const ImageFolder folder(make_folder(dir.path() + "/src", 8), train_crop());  // 24..45 x 20..22
  auto options = ShardWriterOptions().shard_bytes(8000).threads(2).max_side(30).jpeg_quality(85);
  write_shards(sources_of(folder), folder.classes(), dir.path() + "/a", options);
  const auto manifest = write_shards(sources_of(folder), folder.classes(), dir.path() + "/b", options.threads(1));
  EXPECT_GT(manifest.shards.size(), 1u);
  for (const auto& shard : manifest.shards) {
    EXPECT_EQ(contents(dir.path() + "/a/" + shard.file), contents(dir.path() + "/b/" + shard.file)) << shard.file;
  }
  const ShardManifest read = parse_manifest(contents(dir.path() + "/a/manifest.json"), "manifest.json");
  EXPECT_EQ(read.max_side, 30);
  EXPECT_EQ(read.jpeg_quality, 85);

  const ShardSet shards(dir.path() + "/a", train_crop());
  std::multiset<std::vector<uint8_t>> fitting_sources, kept;
  int resized = 0;
  for (int64_t i = 0; i < folder.size(); ++i) {
    const auto source = read_file(folder.path(i));
    const ImageSize size = read_image_size(source, folder.path(i));
    if (std::max(size.width, size.height) <= 30) fitting_sources.insert(source);
    const auto stored = shards.image_bytes(i);
    const ImageSize stored_size = read_image_size(stored, shards.describe(i));
    EXPECT_LE(std::max(stored_size.width, stored_size.height), 30) << shards.describe(i);
    if (std::max(stored_size.width, stored_size.height) < 30) kept.insert(stored);
    resized += std::max(stored_size.width, stored_size.height) == 30;
  }
  // Widths 24, 27, ..., 45 at heights 20..22: in each class 24, 27 and 30 fit, 33..45 are resized
  // to 30 wide.
  EXPECT_EQ(fitting_sources.size(), 3u * 3);
  EXPECT_EQ(resized, 3 * 5 + 3);  // the 15 longer ones, and the 3 of width 30 kept as they were
  EXPECT_EQ(kept.size(), 3u * 2);
  for (const auto& bytes : kept) EXPECT_EQ(fitting_sources.count(bytes), 1u);
}

TEST(ShardSet, NamedByManifestFolderBracesOrOneTar) {
  dpt::testing::TempDir dir;
  const ImageFolder folder(make_folder(dir.path() + "/src", 5), train_crop());
  const auto manifest = write_shards(sources_of(folder), folder.classes(), dir.path() + "/out",
                                     ShardWriterOptions().order("folder").shard_bytes(8000).prefix("train"));
  const int64_t shards = static_cast<int64_t>(manifest.shards.size());
  ASSERT_GE(shards, 3);
  EXPECT_EQ(ShardSet(dir.path() + "/out/manifest.json", train_crop()).size(), folder.size());
  // Without the manifest or the indexes: the shards' own headers and labels, classes by number.
  for (const auto& shard : manifest.shards) {
    fs::remove(fs::path(dir.path() + "/out/" + shard.file).replace_extension(".idx"));
  }
  fs::remove(dir.path() + "/out/manifest.json");
  const ShardSet scanned(dir.path() + "/out", train_crop());
  EXPECT_EQ(scanned.size(), folder.size());
  EXPECT_EQ(scanned.classes(), (std::vector<std::string>{"0", "1", "2"}));
  const ShardSet braces(dir.path() + "/out/train-{000001..00000" + std::to_string(shards - 1) + "}.tar", train_crop());
  EXPECT_EQ(braces.size(), folder.size() - manifest.shards[0].samples);
  EXPECT_EQ(braces.label(0), folder.label(manifest.shards[0].samples));
  EXPECT_EQ(ShardSet(dir.path() + "/out/train-000000.tar", train_crop()).size(), manifest.shards[0].samples);
}

TEST(ShardSet, AShardUnlikeItsManifestIsNamedBeforeTraining) {
  dpt::testing::TempDir dir;
  const ImageFolder folder(make_folder(dir.path() + "/src", 4), train_crop());
  const auto manifest = write_shards(sources_of(folder), folder.classes(), dir.path() + "/out",
                                     ShardWriterOptions().shard_bytes(8000).prefix("train"));
  const std::string second = dir.path() + "/out/" + manifest.shards[1].file;
  fs::resize_file(second, manifest.shards[1].bytes - 512);
  EXPECT_EQ(dpt::testing::error_of<dpt::DataError>([&] { ShardSet(dir.path() + "/out", train_crop()); }),
            dpt::str("shard ", second, " has ", manifest.shards[1].bytes - 512, " bytes and the manifest says ",
                     manifest.shards[1].bytes, ": it was cut short or replaced; copy it again"));
  fs::remove(second);
  EXPECT_NE(dpt::testing::error_of<dpt::DataError>([&] { ShardSet(dir.path() + "/out", train_crop()); })
                .find("shard " + second + " cannot be read"),
            std::string::npos);
}

TEST(ShardSet, BraceNotationAsWebDatasetWritesIt) {
  EXPECT_EQ(expand_braces("a-{08..11}.tar"),
            (std::vector<std::string>{"a-08.tar", "a-09.tar", "a-10.tar", "a-11.tar"}));
  EXPECT_EQ(expand_braces("{x,y}/s-{0..1}.tar"),
            (std::vector<std::string>{"x/s-0.tar", "x/s-1.tar", "y/s-0.tar", "y/s-1.tar"}));
  EXPECT_EQ(expand_braces("plain.tar"), std::vector<std::string>{"plain.tar"});
  EXPECT_NE(dpt::testing::error_of<dpt::ConfigError>([] { expand_braces("a-{1..3.tar"); }).find("without its '}'"),
            std::string::npos);
  EXPECT_NE(dpt::testing::error_of<dpt::ConfigError>([] { expand_braces("a-{5..3}.tar"); }).find("must go upwards"),
            std::string::npos);
}

// A source in memory (CIFAR-10's records, as make-shards writes them): each record a PNG whose
// pixels are the record's exactly, the same bytes on every write, read back as any shard set.
TEST(ShardSet, CifarRecordsAsPngsKeepTheirPixels) {
  dpt::testing::TempDir dir;
  std::vector<Image> pictures;
  std::vector<int64_t> labels;
  for (int i = 0; i < 30; ++i) {
    pictures.push_back(dpt::testing::gradient_image(kCifarSide, kCifarSide, i));
    labels.push_back(i % kCifarClasses);
  }
  const Cifar10 cifar(cifar_records(pictures, labels), "data_batch_1.bin", Transform(TransformOptions()));
  std::vector<SourceImage> images;
  for (int64_t i = 0; i < cifar.size(); ++i) {
    images.push_back({cifar.describe(i), cifar.label(i), [&cifar, i] { return encode_png(cifar.image(i)); }});
  }
  std::vector<std::string> classes;
  for (int64_t c = 0; c < kCifarClasses; ++c) classes.push_back(std::to_string(c));
  auto options = ShardWriterOptions().order("folder").shard_bytes(20000).prefix("train").threads(3);
  write_shards(images, classes, dir.path() + "/a", options);
  write_shards(images, classes, dir.path() + "/b", options.threads(1));
  const ShardSet shards(dir.path() + "/a", Transform(TransformOptions()));
  ASSERT_EQ(shards.size(), 30);
  EXPECT_GT(shards.shard_paths().size(), 1u);
  for (int64_t i = 0; i < shards.size(); ++i) {
    const std::vector<uint8_t> bytes = shards.image_bytes(i);
    ASSERT_EQ(sniff_format(bytes), ImageFormat::Png);
    EXPECT_EQ(decode_image(bytes, "png").pixels, pictures[static_cast<size_t>(i)].pixels) << "record " << i;
    EXPECT_EQ(shards.label(i), labels[static_cast<size_t>(i)]);
  }
  for (const auto& shard : shards.shard_paths()) {
    EXPECT_EQ(contents(shard), contents(dir.path() + "/b/" + fs::path(shard).filename().string())) << shard;
  }
  // A record of other pixels is another PNG: the comparison above can fail.
  EXPECT_NE(decode_image(shards.image_bytes(1), "png").pixels, pictures[0].pixels);
}

// The shard-aware order: each epoch a permutation of every sample, read a few shards at a time,
// the same over every world size, and resumed at another world size without a sample twice.
TEST(ShardAwareSampler, EachWindowReadsFewShardsAndEveryWorldSeesOneOrder) {
  const std::vector<int64_t> sizes = {50, 50, 49, 50, 50, 50, 50, 50, 50, 48, 50, 50, 13};
  int64_t total = 0;
  std::vector<int64_t> shard_of;
  for (size_t s = 0; s < sizes.size(); ++s) {
    total += sizes[s];
    shard_of.insert(shard_of.end(), static_cast<size_t>(sizes[s]), static_cast<int64_t>(s));
  }
  auto options = [&](int64_t world, int64_t rank) {
    return SamplerOptions(world, rank).seed(9).shard_sizes(sizes).open_shards(3).drop_last(true);
  };
  DistributedSampler one(total, options(1, 0));
  one.set_epoch(2);
  const auto order = one.indices();
  EXPECT_EQ(std::set<int64_t>(order.begin(), order.end()).size(), static_cast<size_t>(total));
  // Within each 100 consecutive draws at most 2 x open_shards shards (a window may straddle two
  // groups); a plain permutation touches nearly all 13.
  for (size_t w = 0; w + 100 <= order.size(); w += 100) {
    std::set<int64_t> touched;
    for (size_t i = w; i < w + 100; ++i) touched.insert(shard_of[order[i]]);
    EXPECT_LE(touched.size(), 6u) << "window at " << w;
  }
  DistributedSampler plain(total, SamplerOptions(1, 0).seed(9));
  plain.set_epoch(2);
  std::set<int64_t> plain_touched;
  for (size_t i = 0; i < 100; ++i) plain_touched.insert(shard_of[plain.indices()[i]]);
  EXPECT_GT(plain_touched.size(), 10u);
  one.set_epoch(3);
  EXPECT_NE(one.indices(), order);
  // No shards open at a time: the plain permutation, as for a folder.
  DistributedSampler all_at_once(total, SamplerOptions(1, 0).seed(9).shard_sizes(sizes).open_shards(0));
  all_at_once.set_epoch(2);
  EXPECT_EQ(all_at_once.indices(), plain.indices());

  // Four ranks stop after 40 steps; three ranks go on: every sample of the epoch exactly once.
  std::vector<int64_t> seen;
  for (int64_t rank = 0; rank < 4; ++rank) {
    DistributedSampler four(total, options(4, rank));
    four.set_epoch(2);
    const auto mine = four.indices();
    for (int64_t step = 0; step < 40; ++step) EXPECT_EQ(mine[step], order[step * 4 + rank]);
    seen.insert(seen.end(), mine.begin(), mine.begin() + 40);
  }
  for (int64_t rank = 0; rank < 3; ++rank) {
    DistributedSampler three(total, options(3, rank));
    three.set_epoch(2);
    const auto rest = three.indices_from(160);
    seen.insert(seen.end(), rest.begin(), rest.end());
  }
  std::map<int64_t, int> count;
  for (int64_t i : seen) ++count[i];
  EXPECT_EQ(static_cast<int64_t>(seen.size()), total - (total - 160) % 3);  // drop_last drops what 3 cannot split
  for (const auto& [index, times] : count) EXPECT_EQ(times, 1) << index;
  EXPECT_NE(dpt::testing::error_of<dpt::ConfigError>([&] { DistributedSampler(total + 1, options(1, 0)); })
                .find(dpt::str("the shards hold ", total, " samples, the dataset ", total + 1)),
            std::string::npos);
}
