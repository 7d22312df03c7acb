#include "storage/time_split.h"

#include <algorithm>
#include <cmath>
#include <map>

namespace hippo {
namespace {

size_t index_of(std::string_view part) {
  return static_cast<size_t>(std::find(kTimeParts.begin(), kTimeParts.end(), part) -
                             kTimeParts.begin());
}

double rounded(double seconds) {
  return std::round(seconds * 1000) / 1000;
}

}  // namespace

double WorkerTime::total() const {
  double sum = 0;
  for (double s : seconds) sum += s;
  return sum;
}

nlohmann::json WorkerTime::to_json() const {
  nlohmann::json j{{"worker", worker}, {"jobs", jobs}, {"evaluations", evaluations}};
  for (size_t i = 0; i < kTimeParts.size(); ++i)
    j[std::string(kTimeParts[i]) + "_s"] = rounded(seconds[i]);
  return j;
}

nlohmann::json TimeSplit::to_json() const {
  nlohmann::json list = nlohmann::json::array();
  for (const WorkerTime& w : workers) list.push_back(w.to_json());
  return {{"window_s", rounded(window_s)}, {"workers", list}, {"all", all.to_json()}};
}

TimeSplit split_time(const std::vector<ExecutionRow>& executions, double window_s) {
  std::map<std::string, WorkerTime> by_worker;
  for (const ExecutionRow& e : executions) {
    WorkerTime& w = by_worker[e.worker];
    w.worker = e.worker;
    ++w.jobs;
    const double seen = std::max(0.0, e.ended_at - e.started_at);  // at the master
    if (e.outcome != ExecutionOutcome::kDone || !e.busy_s) {
      // Rows written before version 8 have no parts: their time is "other".
      w.seconds[index_of(e.outcome == ExecutionOutcome::kDone ? "other" : "unfinished")] += seen;
      continue;
    }
    // What the worker reported is bounded by what it measured, and that by what the master saw
    // (their clocks differ: the master's span includes the messages' way).
    const double busy = std::min(*e.busy_s, seen);
    if (auto it = e.times.find("evaluations"); it != e.times.end() && it->is_number_integer())
      w.evaluations += it->get<int64_t>();
    double reported = 0;
    for (size_t i = 0; i < kReportedTimeParts; ++i) {
      auto it = e.times.find(kTimeParts[i]);
      if (it == e.times.end() || !it->is_number()) continue;
      const double part = std::clamp(it->get<double>(), 0.0, busy - reported);
      w.seconds[i] += part;
      reported += part;
    }
    w.seconds[index_of("other")] += busy - reported;
    w.seconds[index_of("dispatch")] += seen - busy;
  }
  TimeSplit split;
  split.window_s = window_s;
  split.all.worker = "all workers";
  for (auto& [name, w] : by_worker) {
    // Jobs that ran past the window (one that outlived its study) leave no idle time.
    w.seconds[index_of("idle")] = std::max(0.0, window_s - w.total());
    split.all.jobs += w.jobs;
    split.all.evaluations += w.evaluations;
    for (size_t i = 0; i < kTimeParts.size(); ++i) split.all.seconds[i] += w.seconds[i];
    split.workers.push_back(w);
  }
  return split;
}

}  // namespace hippo
