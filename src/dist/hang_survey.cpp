#include "hang_survey.h"

#include <condition_variable>
#include <map>
#include <memory>
#include <mutex>
#include <sstream>
#include <thread>
#include <vector>

#include "dptrain/common/error.h"
#include "dptrain/dist/store_text.h"

namespace dpt::dist::detail {

namespace {

using Clock = std::chrono::steady_clock;

struct Report {
  uint64_t seq = 0;
  std::string operation;
};

// What the survey thread found; shared with it, since the caller may stop waiting first.
struct Findings {
  std::mutex mutex;
  std::condition_variable done_changed;
  bool done = false;
  std::string error;
  std::map<int, Report> reports;  // by rank, this rank's own included
};

std::string key_of(int rank) { return str("dptrain/hang/", rank); }

std::string encode(const SurveyOptions& o) { return str(o.seq, " ", o.operation); }

Report decode(const std::string& text) {
  std::istringstream in(text);
  Report report;
  in >> report.seq;
  std::getline(in >> std::ws, report.operation);
  return report;
}

void exchange(const compat::StorePtr& store, const SurveyOptions& options, Findings& findings) {
  write_text(*store, key_of(options.rank), encode(options));
  const auto deadline = Clock::now() + options.grace;
  std::map<int, Report> found;
  while (true) {
    for (int r = 0; r < options.world_size; ++r) {
      if (found.count(r) == 0 && store->check({key_of(r)})) found[r] = decode(read_text(*store, key_of(r)));
    }
    {
      std::lock_guard<std::mutex> lock(findings.mutex);
      findings.reports = found;
    }
    if (static_cast<int>(found.size()) == options.world_size || Clock::now() >= deadline) return;
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
  }
}

std::string rank_list(const std::vector<int>& ranks) {
  std::string text = ranks.size() == 1 ? "Rank " : "Ranks ";
  for (size_t i = 0; i < ranks.size(); ++i) text += (i ? ", " : "") + std::to_string(ranks[i]);
  return text;
}

std::string explain(const SurveyOptions& options, const std::map<int, Report>& reports) {
  std::vector<int> absent;
  std::string others;
  for (int r = 0; r < options.world_size; ++r) {
    const auto it = reports.find(r);
    if (it == reports.end()) {
      absent.push_back(r);
    } else if (it->second.seq < options.seq) {
      others += str(" Rank ", r, " is behind, still in collective #", it->second.seq, " (", it->second.operation, ").");
    } else if (it->second.seq == options.seq && it->second.operation != options.operation) {
      others += str(" Rank ", r, " is in a different collective #", it->second.seq, " (", it->second.operation,
                    "): the ranks do not issue the same collectives in the same order.");
    } else if (it->second.seq > options.seq) {
      others += str(" Rank ", r, " is ahead, in collective #", it->second.seq, " (", it->second.operation,
                    "): this rank fell behind it.");
    }
  }
  std::string text;
  if (!absent.empty()) {
    text = str(" ", rank_list(absent), " did not arrive (or stopped inside it): no report within ",
               options.grace.count() / 1000.0, " s of this rank's, so ", absent.size() == 1 ? "it is" : "they are",
               " stopped (SIGSTOP, a debugger), stuck outside collectives, or gone.");
  }
  text += others;
  if (text.empty()) {
    text = " Every rank reached this collective and timed out in it: the transport stalled, not a rank "
           "(check the network between the hosts).";
  }
  return text;
}

}  // namespace

std::string survey_ranks(const compat::StorePtr& store, const SurveyOptions& options) {
  if (!store || options.world_size < 2) return "";
  auto findings = std::make_shared<Findings>();
  // Detached: a store whose server is stopped blocks its clients, and this rank must not wait on it.
  std::thread([store, options, findings] {
    std::string error;
    try {
      exchange(store, options, *findings);
    } catch (const std::exception& e) {
      error = e.what();
    }
    std::lock_guard<std::mutex> lock(findings->mutex);
    findings->error = error;
    findings->done = true;
    findings->done_changed.notify_all();
  }).detach();
  std::unique_lock<std::mutex> lock(findings->mutex);
  const bool done = findings->done_changed.wait_for(lock, options.grace + std::chrono::seconds(1),
                                                    [&] { return findings->done; });
  if (!done || !findings->error.empty()) {
    return str(" The rendezvous store did not answer the survey of the other ranks",
               done ? "" : str(" within ", options.grace.count() / 1000.0, " s"),
               "; rank 0 serves it for env:// and tcp://, so rank 0 is probably stopped or gone.");
  }
  return explain(options, findings->reports);
}

}  // namespace dpt::dist::detail
