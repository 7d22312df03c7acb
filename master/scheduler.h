// The scheduler: pure functions from the master's state to work, with
// no I/O, so that tests drive them with hand-built trees.
//
// Work is every stage with steps that some trial still needs; a stage is ready when the state at
// its trained_until exists (a checkpoint, or in a worker's memory). Ready work is ordered by its
// critical-path priority (Priorities: StageTree::priorities with the measured time per step of
// its root key);
// an idle worker takes the highest, and a worker that holds the parent state in memory is
// preferred. A state that should exist but does not (a split inside a finished stage, a snapshot
// the worker was asked for too late, a lost checkpoint) is rebuilt by a replay from the nearest
// earlier state on the same path. Evaluations of states trained before anyone asked for them are
// work of their own, ahead of everything else (cheap, and a searcher waits for them).
#pragma once

#include <cstddef>
#include <cstdint>
#include <functional>
#include <map>
#include <set>
#include <string>
#include <unordered_map>
#include <vector>

#include "master/pending_evaluations.h"
#include "master/running_job.h"
#include "master/state_registry.h"
#include "stagetree/tree.h"

namespace hippo::master {

// A unit of work for one worker: train `representative`'s path over [from, to) starting from
// `parent_state` (-1: a fresh model, from == 0) and evaluate after each of `evals`. from == to is
// an evaluation only.
struct WorkItem {
  double priority = 0;
  TrialId representative = -1;
  int64_t from = 0, to = 0;
  int64_t parent_state = -1;
  std::vector<int64_t> evals;
  StageId stage = kNoStage;  // the stage whose pending steps this trains (kNoStage: a replay or
                             // an evaluation), for snapshots where trials end inside it
  bool operator==(const WorkItem&) const = default;
};

// The order of ready stage work: by critical-path priority (the longest remaining path first), or
// first come first served (the oldest trial's work first; `hippo simulate --order fifo`, to see
// what the critical path buys).
enum class ScheduleOrder { kCriticalPath, kFifo };
// "critical-path" or "fifo"; throws std::invalid_argument for anything else.
ScheduleOrder parse_schedule_order(const std::string& text);

// The critical-path priorities of the stages with needed work (StageTree::priorities), kept
// between decisions so that a decision does not cost the whole tree. They are computed anew when
// the needed ends were (a new `version`) or a root key's measured cost per step drifts more than
// 10% from the one used; a trial whose path only raised needed ends since (`raised`: a new trial,
// an extension) updates its path's stages, bottom up, after the upper stages of the splits it
// made (`uppers`: each took the top of a stage on that path, and its children).
// In between, only a stage's own pending steps change (jobs train it); its subtree is untrained
// (nothing below a stage trains before it does), so its priority now is its total then less the
// steps trained since, at the cost used.
class Priorities {
 public:
  void refresh(const StageTree& tree, const std::unordered_map<StageId, int64_t>& needed,
               int64_t version, const std::vector<TrialId>& raised,
               const std::vector<StageId>& uppers,
               const std::function<double(const std::string& root_key)>& cost_per_step);
  // Stages trained further since the last call: those whose needed work is done leave the order
  // (the front is pruned in refresh, but behind the stages that running jobs train, trained ones
  // would pile up, and every decision would step over them).
  void forget_trained(const StageTree& tree, const std::unordered_map<StageId, int64_t>& needed,
                      const std::vector<StageId>& stages);
  // A stage with needed work at its last computation, with what it had then.
  struct Entry {
    double total = 0;           // priority then
    int64_t trained_until = 0;  // the stage's then
    double cost = 0;            // per step of its root key, as used then
  };
  const std::unordered_map<StageId, Entry>& entries() const { return entries_; }
  // Those stages by their total then, highest first (ties: the lower id), without those at the
  // front that were trained since (refresh drops them: the best work is found first).
  using Order = std::set<std::pair<double, StageId>>;  // (-total, stage)
  Order::const_iterator begin() const { return order_.begin(); }
  Order::const_iterator end() const { return order_.end(); }
  double now(const Stage& stage, const Entry& e) const {
    return e.total - double(stage.trained_until - e.trained_until) * e.cost;
  }

 private:
  double cost(const std::string& root_key);
  // Stage s's total from its children's, and its entry if it has needed work.
  void compute(const StageTree& tree, const std::unordered_map<StageId, int64_t>& needed,
               StageId s);

  std::function<double(const std::string&)> cost_per_step_;
  std::unordered_map<StageId, double> totals_;  // of every needed stage
  std::unordered_map<StageId, Entry> entries_;  // of those with needed work
  Order order_;
  int64_t version_ = -1;
  size_t raised_ = 0;                    // of `raised`, those applied
  size_t uppers_ = 0;                    // of `uppers`, likewise
  std::map<std::string, double> costs_;  // root key -> cost per step used
};

// What running jobs will produce: the stages they train, and the states they will report (their
// snapshots and evaluations). Kept between decisions, so that a decision does not cost every
// running job: update() adds the jobs that started since and drops those that ended (the pool
// says which: WorkerPool::take_job_changes), and reads them all again only after the tree split
// (a split moves states and stages on jobs' paths, and adds snapshot orders to running jobs).
class InFlight {
 public:
  // `shape`: a number that changes whenever the tree split or was reloaded (then everything is
  // read again). `changed`: the ids of the jobs that started or ended since the last update, in
  // any order, repeats allowed.
  void update(const StageTree& tree, const std::map<int64_t, RunningJob>& jobs, int64_t shape,
              const std::vector<int64_t>& changed);
  bool trains(StageId stage) const { return stages_.count(stage) != 0; }
  bool reports(const StateKey& state) const { return states_.count(state) != 0; }

 private:
  struct Footprint {
    std::vector<StageId> stages;
    std::vector<StateKey> states;
  };
  void add(int64_t job, const StageTree& tree, const RunningJob& running);
  void remove(std::unordered_map<int64_t, Footprint>::iterator job);

  std::unordered_map<int64_t, Footprint> jobs_;
  std::unordered_map<StageId, int> stages_;  // stage -> the jobs that train it
  std::map<StateKey, int> states_;           // state -> the jobs that report it
  int64_t shape_ = -1;
};

// What the scheduler reads. Every reference outlives the call.
struct SchedulerInput {
  const StageTree& tree;
  const StateRegistry& states;
  const InFlight& in_flight;                      // of the running jobs, updated
  const PendingEvaluations& pending_evaluations;  // by the state they wait for
  // Stage -> the end up to which some trial of a running study needs it (StudyDriver).
  const std::unordered_map<StageId, int64_t>& needed_ends;
  const std::set<StageId>& failed_stages;  // never scheduled again, nor anything below them
  const Priorities& priorities;            // refreshed for these needed ends
  ScheduleOrder order = ScheduleOrder::kCriticalPath;
};

// Every unit of work that can start now, highest priority first. Ties go to the older trial and
// the earlier step, so that the same plan gives the same order of work (and of results, which
// adaptive searchers depend on) in every run. With a limit, the stage work is only the `limit`
// best items (with the critical-path order: no stage's priority can rise above its total at the
// last refresh, so the search stops at the first stage whose total is not above them; of equal
// priorities, the stages first in Priorities' order win), which is what a few idle workers need;
// evaluations and the replays they ask for always come all.
std::vector<WorkItem> ready_work(const SchedulerInput& in, size_t limit = SIZE_MAX);

struct IdleWorker {
  std::string peer;
  int64_t devices = 1;            // pipeline stages it can run
  const std::set<int64_t>* held;  // state ids in its memory
  std::string storage{};          // of its checkpoint directory (storages.h)
};
struct Assignment {
  WorkItem work;
  std::string peer;
};
// Hands work to idle workers in the order given: each item to an idle worker for which
// usable(item, worker) holds, preferring one that holds the item's parent state in memory (a fork
// without reading a file), then one that moves no bytes (the parent's file is on its storage:
// moved_bytes 0), then the one that moves the fewest (the first of equals). Items no idle worker
// can take are skipped.
std::vector<Assignment> assign(
    const std::vector<WorkItem>& work, std::vector<IdleWorker> idle,
    const std::function<bool(const WorkItem&, const IdleWorker&)>& usable,
    const std::function<int64_t(const WorkItem&, const IdleWorker&)>& moved_bytes);

// Idle cores lent (issue 44): while fewer stages can run on a host than it has workers, the jobs
// there that may (the built-in engine on a CPU, unpipelined: its bits do not depend on its thread
// count) run with the threads of the host's idle workers too, and give them back, between two
// steps, once those workers get work. A worker as the decision sees it:
struct CoreHolder {
  std::string peer;
  std::string host;      // its machine (Hello::host); "": unknown, it lends and borrows nothing
  int64_t threads = 1;   // its own (--threads)
  bool busy = false;     // runs a job, or is given one now
  bool borrows = false;  // busy with a job that may take more threads
};
// The threads each borrowing worker's job runs with: its own, plus the threads of its host's idle
// workers, shared evenly among the host's borrowers (those first in peer order take what does not
// divide). Every borrower is in the map (its own threads when nothing is idle); no one else is.
std::map<std::string, int64_t> lent_threads(const std::vector<CoreHolder>& workers);

// The steps at which a job for `work` snapshots: its end, where trials end inside its stage (a
// searcher may extend them from there), and every `every` steps (0: never), ascending.
std::vector<int64_t> snapshot_steps(const StageTree& tree, const WorkItem& work, int64_t every);

// A trial split `split.stage` at `split.at` while it trains: the running jobs that will pass
// through that point on that stage and must snapshot there (none if the state exists already).
std::vector<int64_t> jobs_to_snapshot_at_split(const Split& split, const StageTree& tree,
                                               const StateRegistry& states,
                                               const std::map<int64_t, RunningJob>& jobs);

}  // namespace hippo::master
