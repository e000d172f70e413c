#pragma once
// Which samples each optimizer step trained, one file per rank: the evidence that an epoch
// trained every sample once, across restarts, resumes mid-epoch and changes of world size.
//
//   dpt::train::SampleLog log("samples.txt", rank);    // writes samples.rank<N>.txt, as the timeline names its files
//   log.record(global_step, epoch, indices);             // "<step> <epoch> <index> <index> ...\n"
//
// The step is counted from 1 as the progress lines count it; the indices are the dataset's, of
// this rank's micro-batches in order (samples skipped as bad are not among them). The line is
// written as the step starts, before its collectives: every step that completed (every step a
// checkpoint holds) has its line on every rank, and a step cut short by a failure may have one
// too, which no checkpoint holds. A run resumed into the same file appends, so the steps after
// the checkpoint it resumed from appear twice: the later lines are the ones the weights hold. A
// run resumed at another world size counts its steps by its own global batch (the checkpoint's
// samples of the epoch over it, rounded down), so give it a file of its own and join the two at
// the checkpoint's step (bench/faults' elastic kind does). Under --on-failure continue, a step
// dropped for a lost rank is followed by "dropped <step>": its line above it, and the lost rank's
// line of that step, were not trained (the ranks left number their steps on from where their new
// global batch puts them, which may be that number again). A replacement that joins them appends
// to the file of the rank it replaces after a line "joined <step>". Each line is one write(2), whole or
// absent in a process killed mid-run.

#include <cstdint>
#include <filesystem>
#include <vector>

#include "dptrain/train/logs/log_file.h"

namespace dpt::train {

class SampleLog {
 public:
  // ConfigError when the file cannot be created.
  SampleLog(const std::filesystem::path& path, int rank);
  void record(int64_t global_step, int64_t epoch, const std::vector<int64_t>& indices);
  // The step recorded last, `global_step`, was dropped: a loss cut it short.
  void drop(int64_t global_step);
  // A replacement opened the file of the rank it replaces, after global step `global_step`: the
  // lines above are the lost process's, whose last one no step completed if the others dropped it.
  void joined(int64_t global_step);

 private:
  LogFile file_;
};

}  // namespace dpt::train
