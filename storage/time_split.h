// Where workers' time went during a study: its executions (plan.h's ExecutionRow, each job with
// the parts of its time that its worker reported) split per worker into
//   start, setup, load, fetch, train, eval, save   the parts of finished jobs (protocol::JobTimes)
//   other        the rest of a finished job's time on its worker (messages, the master's orders
//                between steps, what an external trainer did not report)
//   dispatch     a job's time as the master saw it (from sending it to hearing it ended) beyond
//                its worker's: the messages' way and the queues at both ends
//   unfinished   jobs that failed, were abandoned or were lost: their whole time
//   idle         the window (the study's wall time) less all of the above: waiting for work,
//                and a worker's own start before its first job
// so that the parts of each worker add to the window. A job that served several studies counts
// whole in each; a worker that ran no job of the study is not listed. Beside the seconds, the
// evaluations its finished jobs ran (the master's count in each execution's times, "evaluations":
// the states whose metrics came), so that `eval_s / evaluations` is one evaluation's time.
#pragma once

#include <array>
#include <cstdint>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "storage/plan.h"

namespace hippo {

// The parts in the order they are shown; the first seven are JobTimes' fields.
inline constexpr std::array<const char*, 11> kTimeParts = {
    "start", "setup", "load",     "fetch",      "train", "eval",
    "save",  "other", "dispatch", "unfinished", "idle"};
inline constexpr size_t kReportedTimeParts = 7;

struct WorkerTime {
  std::string worker;  // its name; "all workers" for the sum
  int64_t jobs = 0;
  int64_t evaluations = 0;                          // by its finished jobs
  std::array<double, kTimeParts.size()> seconds{};  // by kTimeParts
  double total() const;
  nlohmann::json to_json() const;  // {"worker", "jobs", "evaluations", "<part>_s": seconds, ...}
};

struct TimeSplit {
  double window_s = 0;
  std::vector<WorkerTime> workers;  // by name
  WorkerTime all;                   // the sum over workers (its window: window_s * workers)
  nlohmann::json to_json() const;   // {"window_s", "workers": [...], "all": {...}}
};

// The split of `executions` (those of one study) over a window of `window_s` seconds.
TimeSplit split_time(const std::vector<ExecutionRow>& executions, double window_s);

}  // namespace hippo
