// libFuzzer target: `dptrain report` on files a run left, or anyone else did: metrics.jsonl (one
// JSON record a line) and each rank's timeline (a Chrome trace), read into the run's records and
// rendered as the HTML page. A DataError is the expected answer to bad bytes; any other exception,
// a crash or a sanitizer report is a bug.
//
// The input is metrics.jsonl, then, after each NUL byte, the next rank's timeline (none: the run
// had no timeline).
//
//   scripts/fuzz report 60

#include <cstddef>
#include <cstdint>
#include <filesystem>
#include <fstream>
#include <string>
#include <string_view>

#include "dptrain/common/error.h"
#include "dptrain/train/logs/timeline.h"
#include "run_report.h"
#include "scratch_dir.h"

namespace fs = std::filesystem;

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  static const ScratchDir scratch("report");
  const fs::path& dir = scratch.fresh();

  std::string_view rest(reinterpret_cast<const char*>(data), size);
  const fs::path timeline = dir / "timeline.json";
  for (int file = 0;; ++file) {
    const size_t end = rest.find('\0');
    const fs::path path = file == 0 ? dir / "metrics.jsonl" : dpt::train::timeline_path(timeline, file - 1);
    std::ofstream(path, std::ios::binary | std::ios::trunc).write(rest.data(), static_cast<std::streamsize>(
                                                                                   std::min(end, rest.size())));
    if (end == std::string_view::npos) break;
    rest.remove_prefix(end + 1);
  }
  try {
    dpt::report::render_report(dpt::report::read_run(dpt::report::RunFiles(dir)));
  } catch (const dpt::DataError&) {
  }
  return 0;
}
