#pragma once
// How a launcher tells a new round of workers (a restart after a failure, an elastic
// re-formation) what ended the round before, for them to report with the round's first step
// (train's membership record): the launcher sets these variables, the trainer reads them.

namespace dpt {

// What ended the round before, in one line ("rank 1 was killed by signal 9").
inline constexpr const char* kRoundEndCauseVariable = "DPTRAIN_PREVIOUS_ROUND_END";
// When the launcher saw it end: nanoseconds of this machine's steady clock (its workers' clock
// too; another machine's would not compare).
inline constexpr const char* kRoundEndTimeVariable = "DPTRAIN_PREVIOUS_ROUND_END_NS";

}  // namespace dpt
