#include "dptrain/dist/reformation.h"

#include <algorithm>
#include <sstream>
#include <thread>

#include "dptrain/common/error.h"
#include "dptrain/dist/store_text.h"

namespace dpt::dist {

namespace {

using Clock = std::chrono::steady_clock;

// How often a rank waiting for the list looks at the store.
constexpr std::chrono::milliseconds kListPoll{20};

std::string reform_key(const ReformationOptions& o, const std::string& name) {
  return str("dptrain/reform/", o.generation(), "/", name);
}

std::string encode_ranks(const std::vector<int>& ranks) {
  std::string text;
  for (int r : ranks) text += str(text.empty() ? "" : " ", r);
  return text;
}

std::vector<int> decode_ranks(const std::string& text) {
  std::vector<int> ranks;
  std::istringstream in(text);
  for (int r; in >> r;) ranks.push_back(r);
  return ranks;
}

// The ranks that said they go on, ascending.
std::vector<int> present(c10d::Store& store, const ReformationOptions& o) {
  std::vector<int> ranks;
  for (int r = 0; r < o.world_size(); ++r) {
    if (store.check({reform_key(o, str("here/", r))})) ranks.push_back(r);
  }
  return ranks;
}

std::vector<int> agree(c10d::Store& store, const ReformationOptions& o) {
  const std::string list_key = reform_key(o, "list");
  for (int r : o.lost()) write_text(store, reform_key(o, str("lost/", r)), "1");
  write_text(store, reform_key(o, str("here/", o.rank())), std::to_string(o.progress()));
  const auto closes = Clock::now() + o.window();
  while (true) {
    if (store.check({list_key})) return decode_ranks(read_text(store, list_key));
    const std::vector<int> here = present(store, o);
    int accounted = 0;
    for (int r = 0; r < o.world_size(); ++r) {
      const bool said = std::binary_search(here.begin(), here.end(), r);
      const bool gone = !said && (store.check({reform_key(o, str("lost/", r))}) || (o.gone() && o.gone()(r)));
      accounted += said || gone ? 1 : 0;
    }
    if (accounted == o.world_size() || Clock::now() >= closes) {
      const std::string mine = encode_ranks(here);
      const std::vector<uint8_t> wanted(mine.begin(), mine.end());
      const std::vector<uint8_t> closed = store.compareSet(list_key, {}, wanted);
      return decode_ranks(std::string(closed.begin(), closed.end()));
    }
    std::this_thread::sleep_for(kListPoll);
  }
}

}  // namespace

Survivors agree_on_survivors(c10d::Store& store, const ReformationOptions& o) {
  DPT_CHECK(o.rank() >= 0 && o.rank() < o.world_size() && o.generation() >= 1, ConfigError,
            "agree_on_survivors: rank ", o.rank(), " of ", o.world_size(), ", generation ", o.generation());
  std::vector<int> ranks;
  std::vector<int64_t> progress;
  try {
    ranks = agree(store, o);
    for (int r : ranks) progress.push_back(std::stoll(read_text(store, reform_key(o, str("here/", r)))));
  } catch (const Error&) {
    throw;
  } catch (const std::exception& e) {
    throw DistError(str("rank ", o.rank(), ": the ranks that remain cannot agree on a new group: the store does not ",
                        "answer (", e.what(), "). Rank 0 serves it under dptrain launch, so rank 0 is gone: lost (then ",
                        "the job cannot go on in-process; --max-restarts and --resume auto restart it from its last ",
                        "checkpoint), or finished without this rank"));
  }
  const auto mine = std::find(ranks.begin(), ranks.end(), o.rank());
  DPT_CHECK(mine != ranks.end(), DistError, "rank ", o.rank(), ": the ranks that remain (", encode_ranks(ranks),
            ") formed their group without this rank, which arrived after the list closed (it was stopped or slow ",
            "for longer than the ", std::chrono::duration<double>(o.window()).count(),
            " s window): it leaves the job");
  Survivors left;
  left.rank = static_cast<int>(mine - ranks.begin());
  left.ranks = std::move(ranks);
  left.progress = std::move(progress);
  return left;
}

}  // namespace dpt::dist
