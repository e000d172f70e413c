#include "dptrain/data/sampler.h"

#include <gtest/gtest.h>

#include <set>
#include <sstream>

#include "dptrain/common/error.h"
#include "support/python_oracle.h"

using dpt::data::DistributedSampler;
using dpt::data::EvalSampler;
using dpt::data::SamplerOptions;

namespace {

struct Case {
  int64_t size, world, rank;
  uint64_t seed;
  int64_t epoch;
  bool drop_last, shuffle;
};

const std::vector<Case> kCases = {
    {10, 3, 0, 0, 0, false, true},     {10, 3, 2, 0, 0, false, true},    {10, 3, 1, 42, 5, true, true},
    {7, 4, 3, 7, 1, false, false},     {7, 4, 3, 7, 1, true, false},     {2, 5, 4, 1, 2, false, true},
    {1000, 8, 5, 123, 9, false, true}, {1001, 8, 7, 123, 9, true, true}, {50000, 2, 1, 0, 3, false, true},
    {16, 4, 1, 3, 0, true, true},      {5, 1, 0, 11, 4, false, true},
};

std::vector<int64_t> ours(const Case& c) {
  DistributedSampler sampler(c.size,
                             SamplerOptions(c.world, c.rank).seed(c.seed).drop_last(c.drop_last).shuffle(c.shuffle));
  sampler.set_epoch(c.epoch);
  return sampler.indices();
}

}  // namespace

TEST(DistributedSampler, MatchesPyTorchIndexLists) {
  std::ostringstream script;
  script << "from torch.utils.data.distributed import DistributedSampler as S\n"
         << "for n, w, r, seed, epoch, drop, shuffle in [";
  for (const auto& c : kCases) {
    script << "(" << c.size << "," << c.world << "," << c.rank << "," << c.seed << "," << c.epoch << ","
           << (c.drop_last ? "True" : "False") << "," << (c.shuffle ? "True" : "False") << "),";
  }
  script << "]:\n"
         << "    s = S(range(n), num_replicas=w, rank=r, shuffle=shuffle, seed=seed, drop_last=drop)\n"
         << "    s.set_epoch(epoch)\n"
         << "    print(' '.join(map(str, list(s))))\n";
  auto out = dpt::testing::run_python(script.str());
  if (!out) DPT_MISSING_DEPENDENCY(dpt::testing::oracle_missing("torch"));
  auto expected = dpt::testing::parse_lines(*out);
  ASSERT_EQ(expected.size(), kCases.size());
  for (size_t i = 0; i < kCases.size(); ++i) {
    EXPECT_EQ(ours(kCases[i]), expected[i]) << "case " << i;
  }
}

TEST(DistributedSampler, PadsByRepeatingThePermutationStart) {
  const auto perm = dpt::data::seeded_permutation(5, 0);
  DistributedSampler r0(5, SamplerOptions(2, 0).seed(0));
  DistributedSampler r1(5, SamplerOptions(2, 1).seed(0));
  EXPECT_EQ(r0.indices(), (std::vector<int64_t>{perm[0], perm[2], perm[4]}));
  EXPECT_EQ(r1.indices(), (std::vector<int64_t>{perm[1], perm[3], perm[0]}));
  DistributedSampler dropped(5, SamplerOptions(2, 1).seed(0).drop_last(true));
  EXPECT_EQ(dropped.indices(), (std::vector<int64_t>{perm[1], perm[3]}));
}

TEST(DistributedSampler, ShardsCoverTheEpochAndChangeWithIt) {
  std::multiset<int64_t> seen;
  for (int r = 0; r < 3; ++r) {
    DistributedSampler s(9, SamplerOptions(3, r).seed(5));
    s.set_epoch(2);
    for (auto i : s.indices()) seen.insert(i);
  }
  EXPECT_EQ(seen, (std::multiset<int64_t>{0, 1, 2, 3, 4, 5, 6, 7, 8}));
  DistributedSampler s(100, SamplerOptions(1, 0).seed(5));
  auto first = s.indices();
  s.set_epoch(1);
  EXPECT_NE(first, s.indices());
}

TEST(DistributedSampler, ContinuingAtTheSameWorldDropsTheDoneBatches) {
  for (const Case& c : kCases) {
    DistributedSampler sampler(c.size,
                               SamplerOptions(c.world, c.rank).seed(c.seed).drop_last(c.drop_last).shuffle(c.shuffle));
    sampler.set_epoch(c.epoch);
    const auto whole = sampler.indices();
    const int64_t n = static_cast<int64_t>(whole.size());
    for (int64_t done : {int64_t{0}, std::min<int64_t>(1, n), n / 2, std::max<int64_t>(n - 1, 0), n}) {
      const std::vector<int64_t> rest(whole.begin() + done, whole.end());
      EXPECT_EQ(sampler.indices_from(done * c.world), rest) << "size " << c.size << " world " << c.world;
    }
  }
}

TEST(DistributedSampler, ContinuingAtAnotherWorldReshardsWhatIsLeft) {
  // 3 ranks took 2 batches of 4 (24 samples) of a 50-sample epoch; 2 ranks share the other 26.
  const auto order = dpt::data::seeded_permutation(50, 7 + 1);
  std::vector<int64_t> done;
  for (int r = 0; r < 3; ++r) {
    DistributedSampler before(50, SamplerOptions(3, r).seed(7));
    before.set_epoch(1);
    const auto shard = before.indices();
    done.insert(done.end(), shard.begin(), shard.begin() + 8);
  }
  std::multiset<int64_t> expected_done(order.begin(), order.begin() + 24);
  EXPECT_EQ(std::multiset<int64_t>(done.begin(), done.end()), expected_done);
  std::multiset<int64_t> rest;
  for (int r = 0; r < 2; ++r) {
    DistributedSampler after(50, SamplerOptions(2, r).seed(7));
    after.set_epoch(1);
    const auto shard = after.indices_from(24);
    EXPECT_EQ(shard.size(), 13u);
    rest.insert(shard.begin(), shard.end());
  }
  EXPECT_EQ(rest, std::multiset<int64_t>(order.begin() + 24, order.end()));
  // An odd rest is padded from the epoch's start; nothing is left once every sample is done.
  DistributedSampler odd(50, SamplerOptions(4, 3).seed(7));
  odd.set_epoch(1);
  EXPECT_EQ(odd.indices_from(24), (std::vector<int64_t>{order[27], order[31], order[35], order[39], order[43],
                                                       order[47], order[1]}));
  EXPECT_TRUE(odd.indices_from(50).empty());
  EXPECT_TRUE(odd.indices_from(64).empty());
}

TEST(DistributedSampler, AnEpochEndsAtItsLengthWithNothingLeft) {
  // Padded: 50 over 4 ranks trains 52 positions, the last two repeats; the order ends at 50.
  DistributedSampler padded(50, SamplerOptions(4, 0).seed(7));
  EXPECT_EQ(padded.total_size(), 52);
  EXPECT_EQ(padded.epoch_length(), 50);
  // Truncated: drop_last keeps 48; the 2 samples past them are not this epoch's.
  DistributedSampler truncated(50, SamplerOptions(4, 0).seed(7).drop_last(true));
  EXPECT_EQ(truncated.epoch_length(), 48);
  // Repeated augmentation keeps 768 draws of 1,000 samples.
  DistributedSampler repeated(1000, SamplerOptions(4, 0).seed(7).repetitions(3));
  EXPECT_EQ(repeated.epoch_length(), 768);
  for (const DistributedSampler* sampler : {&padded, &truncated, &repeated}) {
    EXPECT_TRUE(sampler->indices_from(sampler->epoch_length()).empty());
    EXPECT_EQ(sampler->indices_from(sampler->epoch_length() - 4).size(), 1u);  // one more each
  }
}

TEST(DistributedSampler, StateSavesAndLoads) {
  DistributedSampler a(20, SamplerOptions(2, 1).seed(77));
  a.set_epoch(6);
  torch::serialize::OutputArchive out;
  a.save(out);
  std::ostringstream bytes;
  out.save_to(bytes);

  DistributedSampler b(20, SamplerOptions(2, 1));
  torch::serialize::InputArchive in;
  std::istringstream source(bytes.str());
  in.load_from(source);
  b.load(in);
  EXPECT_EQ(b.epoch(), 6);
  EXPECT_EQ(b.state().seed, 77u);
  EXPECT_EQ(a.indices(), b.indices());
}

TEST(DistributedSampler, RejectsBadShards) {
  EXPECT_THROW(DistributedSampler(10, SamplerOptions(0, 0)), dpt::ConfigError);
  EXPECT_THROW(DistributedSampler(10, SamplerOptions(2, 2)), dpt::ConfigError);
}

TEST(EvalSampler, CountsEverySampleOnceWithoutPadding) {
  std::vector<int64_t> all;
  int64_t total = 0;
  for (int r = 0; r < 4; ++r) {
    EvalSampler s(10, 4, r);
    auto mine = s.indices();
    EXPECT_EQ(static_cast<int64_t>(mine.size()), s.num_samples());
    total += s.num_samples();
    all.insert(all.end(), mine.begin(), mine.end());
  }
  EXPECT_EQ(total, 10);
  std::sort(all.begin(), all.end());
  for (int64_t i = 0; i < 10; ++i) EXPECT_EQ(all[i], i);
  EXPECT_EQ(EvalSampler(10, 4, 1).indices(), (std::vector<int64_t>{1, 5, 9}));
  EXPECT_EQ(EvalSampler(2, 4, 3).num_samples(), 0);
}

// torchvision's RASampler (references/classification/sampler.py, which the package does not
// ship, so its index arithmetic is spelled out here over torch.randperm): each rank's indices,
// and copies numbered so that every (index, copy) pair of an epoch is handed out once.
TEST(DistributedSampler, RepeatedAugmentationMatchesRaSampler) {
  struct RaCase {
    int64_t size, world, reps;
    uint64_t seed;
    int64_t epoch;
  };
  const std::vector<RaCase> cases = {{1000, 3, 3, 0, 0}, {1000, 8, 3, 5, 2}, {700, 2, 4, 1, 1}, {513, 1, 2, 9, 7}};
  std::ostringstream script;
  script << "import math, torch\n"
            "def ra(n, world, rank, reps, seed, epoch):\n"
            "    g = torch.Generator(); g.manual_seed(seed + epoch)\n"
            "    indices = torch.randperm(n, generator=g).tolist()\n"
            "    num_samples = int(math.ceil(n * float(reps) / world))\n"
            "    total = num_samples * world\n"
            "    selected = int(math.floor(n // 256 * 256 / world))\n"
            "    indices = [e for e in indices for _ in range(reps)]\n"
            "    indices += indices[: total - len(indices)]\n"
            "    return indices[rank:total:world][:selected]\n";
  for (const auto& c : cases) {
    for (int64_t rank = 0; rank < c.world; ++rank) {
      script << "print(*ra(" << c.size << ", " << c.world << ", " << rank << ", " << c.reps << ", " << c.seed << ", "
             << c.epoch << "))\n";
    }
  }
  auto out = dpt::testing::run_python(script.str());
  if (!out) DPT_MISSING_DEPENDENCY(dpt::testing::oracle_missing("torch"));
  const auto expected = dpt::testing::parse_lines(*out);
  size_t line = 0;
  for (const auto& c : cases) {
    std::set<std::pair<int64_t, int64_t>> drawn;
    for (int64_t rank = 0; rank < c.world; ++rank) {
      DistributedSampler sampler(c.size, SamplerOptions(c.world, rank).seed(c.seed).repetitions(c.reps));
      sampler.set_epoch(c.epoch);
      std::vector<int64_t> indices;
      for (int64_t draw : sampler.indices()) {
        const auto [index, copy] = dpt::data::draw_sample(draw, c.size);
        EXPECT_LT(copy, c.reps);
        EXPECT_TRUE(drawn.insert({index, copy}).second) << "copy " << copy << " of " << index << " drawn twice";
        indices.push_back(index);
      }
      ASSERT_LT(line, expected.size());
      EXPECT_EQ(indices, expected[line++]) << c.size << " samples, rank " << rank << " of " << c.world;
      EXPECT_EQ(sampler.num_samples(), static_cast<int64_t>(indices.size()));
    }
  }
}

// Resuming a repeated-augmentation epoch continues its draws, as the plain sampler does.
TEST(DistributedSampler, RepeatedAugmentationContinuesMidEpoch) {
  DistributedSampler sampler(1000, SamplerOptions(4, 1).seed(3).repetitions(3));
  sampler.set_epoch(2);
  const auto all = sampler.indices();
  const auto rest = sampler.indices_from(40 * 4);
  EXPECT_EQ(rest, std::vector<int64_t>(all.begin() + 40, all.end()));
  EXPECT_THROW(DistributedSampler(255, SamplerOptions(1, 0).repetitions(3)), dpt::ConfigError);
}
