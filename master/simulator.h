// `hippo simulate`: the real master (master.h: its handlers, the scheduler, the searchers, the
// search plan, the stage tree) in virtual time, with simulated workers instead of processes and
// sockets. Nothing trains: a worker's job takes the time the TimeModel says, and its evaluations
// report what a MetricModel (simulated_metrics.h) says. The master runs unchanged over a
// Transport (transport.h) whose other end is this simulator, on a clock that the simulator
// advances from event to event (protocol/clock.h), and its plan is a real SQLite database, kept
// in memory while the simulation runs (no commit writes a file: the per-message costs leave out
// the commits' writes, which bench/plan_sync.sh measures) and written to a file at the end, thrown
// away or kept at --plan for the history queries.
//
// A simulated worker does what a real one does, in the order a real one does it: after its
// hello, it takes a job, loads the parent state unless it holds it in memory, trains, evaluates
// at the job's evaluation steps (a metric message each), snapshots where ordered (a snapshot
// message once the file is written, without stopping the training), and says done with the
// states it holds (an LRU of `cache_states`, as worker/state_cache.h). It stops at its next step
// when told to abandon. A failure (--mtbf) kills it: its job and memory are lost, and it says
// hello again `restart_s` later, which is how the master learns it lost the job (as with a real
// worker restarted by its supervisor). Heartbeats are not simulated: the master's worker timeout
// is off, so a worker is lost only through its restart.
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "master/master.h"
#include "master/reports.h"
#include "master/simulated_metrics.h"
#include "searchers/spec.h"

namespace hippo::master {

// How long things take, in seconds, for one root key (one model and data set).
struct JobTimes {
  double step_s = 0.01;  // one training step
  double eval_s = 0;     // one evaluation
  double job_s = 0;      // every job's own cost (the message, building the engine, the data)
  int64_t state_bytes = 1 << 20;  // one checkpoint
};

struct TimeModel {
  JobTimes defaults;
  std::map<std::string, JobTimes> by_root_key;  // measured ones (times_from_plan)
  double bandwidth_bytes_s = 1e9;               // checkpoint writes and reads
  const JobTimes& of(const std::string& root_key) const;
};

// The times of every root key that the finished jobs of a plan measured: per root key, a least-
// squares fit of the done training jobs' durations to job_s + steps * step_s + evals * eval_s
// (a job's evaluations: its representative's metrics within its steps), state_bytes from its
// checkpoints. Where evaluations come in step with the steps (a trial-based run: every job
// evaluates once an epoch), they count in step_s and eval_s comes from the evaluation-only jobs;
// jobs all of one length give step_s alone (job_s 0). Throws std::runtime_error for a file that
// is not a plan.
std::map<std::string, JobTimes> times_from_plan(const std::string& path);

struct SimulatedStudy {
  StudySpec spec;
  nlohmann::json spec_json;
  double submit_at_s = 0;
};

struct SimulationOptions {
  int64_t workers = 1;
  int64_t devices = 1;       // per worker (pipeline stages it can run)
  int64_t cache_states = 4;  // states a worker keeps in memory
  Policy policy = Policy::kShared;
  ScheduleOrder order = ScheduleOrder::kCriticalPath;
  TimeModel times;
  double mtbf_s = 0;      // mean time between failures of one worker (0: none)
  double restart_s = 60;  // from a failure to the worker's next hello
  uint64_t seed = 1;      // failures
  StudyRules rules;       // --allow-exec searcher, budgets, --keep-checkpoints
  std::string plan_path;  // "" : a temporary file, removed at the end
  std::string events;     // --events FILE: the studies' events (events.h), at simulated times
};

// What the master's own work cost, per kind of message and per decision.
struct SimulatedRun {
  std::vector<StudySummary> studies;
  double makespan_s = 0;   // from 0 to the end of the last study
  double busy_s = 0;       // the workers' busy time (GPU-hours * 3600)
  double utilization = 0;  // busy_s / (workers * makespan_s)
  int64_t steps_executed = 0, steps_unique = 0, steps_trial_based = 0;
  double critical_path_s = 0;  // the longest trial alone, at its root key's times
  int64_t jobs = 0, failures = 0;
  MasterCosts master;
  int64_t plan_bytes = 0;
  double wall_s = 0;  // real time the simulation took
  nlohmann::json to_json() const;
};

// Runs the studies to their end with the options' policy and order. Throws std::runtime_error
// when the simulation cannot go on (work that no simulated worker can take, a metric the model
// does not have), SpecError for a bad spec.
SimulatedRun simulate(const std::vector<SimulatedStudy>& studies, const SimulationOptions& options,
                      MetricModel& metrics);

}  // namespace hippo::master
