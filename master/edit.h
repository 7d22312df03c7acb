// How the master changes its state: one decision, one Edit (LevelDB's VersionEdit), one apply.
//
// A handler of a worker's or client's message, or the study driver reacting to an event, first
// decides on the state as it is, without changing it: a decision that throws (a bad message, a
// searcher that misbehaves) has changed nothing. What it decided is an Edit: a list of typed
// operations (a trial placed or ended, metrics recorded, a stage trained further, a state added,
// dropped or re-homed, an execution, an event, a file to remove once committed), the work it
// hands the study driver next, and the messages to send. StudyDriver::apply carries the
// operations out in order, each writing its rows to the search plan (in the transaction that is
// open) and then changing memory; the master sends the messages once that transaction has
// committed. Applying does not throw but for a failure of the plan itself, and then the master
// stops: a restart resumes from the plan, which holds everything that was acknowledged.
//
// Searcher events go through the driver's queue of Work, never through recursion: applying an
// edit may queue work (a trial was trained: close it; a metric came: deliver it), and the master
// takes the next item only once the edit before it is applied. 100,000 trials that close at once
// are 100,000 items in a queue, on a stack of constant depth.
#pragma once

#include <cstdint>
#include <memory>
#include <nlohmann/json.hpp>
#include <optional>
#include <set>
#include <string>
#include <utility>
#include <variant>
#include <vector>

#include "master/running_job.h"
#include "master/state_registry.h"
#include "protocol/trust.h"
#include "searchers/searcher.h"
#include "stagetree/tree.h"
#include "storage/plan.h"

namespace hippo::master {

using nlohmann::json;

struct TrackedStudy;  // study_driver.h
struct LoadedStudy;

// ---------------------------------------------------------------------------------------------
// The study driver's work: what it decides on next.

// An evaluation of `trial` after `step` steps came (from a worker, or measured before for another
// trial): `metrics` as measured, or none with `absent` saying why (its job ended without them).
struct Deliver {
  TrialId trial = -1;
  int64_t step = 0;
  json metrics = json::object();
  std::string absent{};
  Provenance provenance{};  // who measured them
};
// The trial may be trained to its length and evaluated: it closes if it is.
struct Close {
  TrialId trial = -1;
};
// An event for a study's searcher; its operations are carried out next, in order.
struct Feed {
  int64_t study = 0;
  SearcherEvent event;
};
// One operation of a searcher's, checked, then carried out.
struct Operate {
  int64_t study = 0;
  Operation op;
};
// A study ended: the states that no running study can reach are kept or evicted (retention.h).
struct Collect {};
using Work = std::variant<Deliver, Close, Feed, Operate, Collect>;

// An event for a study's searcher, as work.
inline Work searcher_work(int64_t study, SearcherEvent::Kind kind, RequestId trial,
                          int64_t step = 0, double value = 0) {
  Work w{std::in_place_type<Feed>};
  Feed& f = std::get<Feed>(w);
  f.study = study;
  f.event.kind = kind;
  f.event.trial = trial;
  f.event.step = step;
  f.event.value = value;
  return w;
}

// ---------------------------------------------------------------------------------------------
// The operations of an edit.

namespace edit {

// A searcher created a trial: it is known from now on, and enters the plan and the tree when it is
// first placed.
struct TrackTrial {
  int64_t study = 0;
  RequestId request = 0;
  json params;
  std::optional<Fork> fork;
};
// A trial is placed in the tree up to `length` (its row first, when it has none: `row`), asks to
// be evaluated at `evals`, and runs. The evaluations measured already for other trials follow as
// Deliver work; the budget counts `steps` and `evaluations` more.
struct PlaceTrial {
  TrialId trial = -1;
  int64_t length = 0;
  std::vector<int64_t> evals;
  std::optional<TrialRow> row;
  int64_t steps = 0, evaluations = 0;
};
// A trial ends: done, stopped, failed or diverged, at `step` when it ended before its length.
struct EndTrial {
  TrialId trial = -1;
  TrialStatus status = TrialStatus::kDone;
  std::string reason;
  std::optional<int64_t> step{};
};
// The metrics of an evaluation the trial asked for (it waits for it no more).
struct RecordMetrics {
  TrialId trial = -1;
  int64_t step = 0;
  json metrics;
  Provenance provenance{};
};
// The metrics measured on a state, kept for the trials that will ask for them.
struct CacheMetrics {
  StateKey state;
  Measured measured;
};
// An event fed to a study's searcher: journaled (Searcher::replays_exactly), or its whole state
// saved (`state`, when due).
struct Journal {
  int64_t study = 0;
  SearcherEvent event;
  std::optional<json> state{};
};
struct EndStudy {
  int64_t study = 0;
  StudyStatus status = StudyStatus::kDone;
  std::string error;
};
// A stage failed in the engine: never scheduled again, nor anything below it.
struct FailStage {
  StageId stage = kNoStage;
};
// A stage was trained up to `trained_until`.
struct TrainStage {
  StageId stage = kNoStage;
  int64_t trained_until = 0;
};
// A state a worker reported (with its checkpoint row when it has a file).
struct AddState {
  int64_t id = 0;
  StateInfo info;
};
// A state goes: its checkpoint was lost (`lost`: an event says why) or evicted; its row goes now,
// its files once the transaction has committed.
struct DropState {
  int64_t id = 0;
  std::string lost{};
};
// The storages that hold a state's file now (a copy fetched, or lost: `lost` says why).
struct SetStorages {
  int64_t id = 0;
  std::set<std::string> storages;
  std::string lost{};
  std::string lost_on{};  // the storage whose copy was lost
};
// A state that no running study needs is kept for later studies since `retained_at` (nullopt:
// a running study needs it again).
struct Retain {
  int64_t id = 0;
  std::optional<double> retained_at;
};
struct AddExecution {
  ExecutionRow row;
};
struct AddEvent {
  std::optional<int64_t> study;
  std::string kind;
  json detail;
};
// Work done for studies: steps executed (redone ones too), worker seconds, bytes fetched.
struct Count {
  std::set<int64_t> studies;
  int64_t steps = 0;
  double busy_s = 0;
  int64_t bytes = 0;
  double transfer_s = 0;
};
// A file that no row names any more (a duplicate snapshot, an orphan's): removed once committed.
struct RemoveFile {
  std::set<std::string> storages;
  std::string file;
};

// --- Studies (StudyDriver::apply_op) ---

// A study is submitted: its row, its searcher's state and its "submitted" event; then it runs
// here, its searcher's first operations (`first`) queued.
struct CreateStudy {
  std::shared_ptr<TrackedStudy> study;
  json spec;
  std::vector<Operation> first;
};
// A study of the plan runs here (a restart takes it up; `resumed`: it was interrupted, and its
// status is checked and changed in one statement), its searcher and trials as loaded.
struct TakeUpStudy {
  std::shared_ptr<LoadedStudy> loaded;
  bool resumed = false;
};
// A running study of the plan that this master does not run is interrupted, saying why.
struct InterruptStoredStudy {
  int64_t study = 0;
  std::string name, why;
};

// The studies' accounts are written (those changed since, and every running one at least every
// `every_s` seconds: its run time grows).
struct SaveAccounts {
  double every_s = 0;
};

// --- Workers and their jobs: the master's part (Master::apply) ---

// A worker said hello on `peer`: it joins the pool (a job it had before is lost: its end is in
// the same edit, before this).
struct JoinWorker {
  std::string peer;
  protocol::PeerIdentity identity;
  protocol::Hello hello;
};
// A worker leaves the pool (lost, drained): its job's end is in the same edit, before this.
struct LeaveWorker {
  std::string peer;
};
// A storage's first key becomes its owner (storages.h).
struct AdmitStorage {
  std::string storage;
  protocol::PeerIdentity identity;
};
// A job is sent to the worker on `peer` (its order is among the edit's messages): its row in
// running_jobs, then the pool's. `keeps_trainer`: its worker keeps a long-lived trainer after it.
struct StartJob {
  std::string peer;
  RunningJob job;
  bool keeps_trainer = false;
};
// A running job got further: its states are announced up to `reported` (its steps counted up to
// there, with a Count in the same edit: the row's `counted`), it trained up to `progress`, it
// reported the metrics of `evaluated`, its worker holds `held` in memory.
struct JobProgress {
  int64_t job = 0;
  int64_t reported = 0, progress = 0;
  std::optional<int64_t> evaluated{}, held{};
};
// A running job's worker is told to also snapshot at a split point: its row names the file (a
// restarted master keeps it), and the order goes to the worker.
struct SnapshotAt {
  int64_t job = 0;
  protocol::SnapshotOrder order;
};
// No running study needs the job: its worker is told to stop (the order is among the messages).
struct AbandonJob {
  int64_t job = 0;
};
// A running job ended (its execution is in the same edit): its row goes, its worker is idle and
// holds `held` (nullopt: what it held). `done`: it trained its steps in `busy_s` (the root key's
// step cost learns from it), so its stage's failed attempts and claims are forgotten and its
// worker's run of failures ends.
struct EndJob {
  int64_t job = 0;
  std::optional<std::vector<int64_t>> held{};
  bool done = false;
  double busy_s = 0;
};
// A job of an earlier master (running_jobs of another incarnation) is settled: adopted from its
// worker's record, or given up.
struct SettleEarlierJob {
  std::string incarnation;
  int64_t job = 0;
};
// An attempt at a stage failed on the worker on `peer`: its job was lost (`lost`) or the worker
// could not write or its trainer died; the next attempt waits (stage_retry_delay).
struct Attempt {
  StageId stage = kNoStage;
  std::string peer;
  bool lost = false;
};
// A stage made progress: its failed attempts (and, `claims`, the claims about it) are forgotten.
struct ClearFailures {
  StageId stage = kNoStage;
  bool claims = false;
};
// A worker of `key` claims that the stage fails, or that its parent is unreadable (Claims).
struct Claim {
  StageId stage = kNoStage;
  std::string key;
};
// A worker says why it cannot work ("": it recovered).
struct WorkerFault {
  std::string peer, fault;
};
// A worker failed a job for a reason of its own (set aside after kWorkerFailuresInARow).
struct WorkerFailed {
  std::string peer, error;
};
// An operator drains the worker: no more work; it exits once idle and handed over
// (`handed_over`: the states only its storage held are being handed over now).
struct DrainWorker {
  std::string peer;
  bool handed_over = false;
};
// An idle worker is told to start a long-lived trainer ahead of its stages (Prepare), or, `keeps`
// false, to end the one it keeps (EndTrainer: no running study has one any more).
struct KeepTrainer {
  std::string peer;
  bool keeps = true;
};
// A running job's threads from its next step on (lent_threads, scheduler.h): its order says so,
// and its worker is told (Threads).
struct LendThreads {
  int64_t job = 0;
  int64_t threads = 1;
};

}  // namespace edit

using EditOp = std::variant<
    edit::TrackTrial, edit::PlaceTrial, edit::EndTrial, edit::RecordMetrics, edit::CacheMetrics,
    edit::Journal, edit::EndStudy, edit::FailStage, edit::TrainStage, edit::AddState,
    edit::DropState, edit::SetStorages, edit::Retain, edit::AddExecution, edit::AddEvent,
    edit::Count, edit::RemoveFile, edit::JoinWorker, edit::LeaveWorker, edit::AdmitStorage,
    edit::StartJob, edit::JobProgress, edit::SnapshotAt, edit::AbandonJob, edit::EndJob,
    edit::SettleEarlierJob, edit::Attempt, edit::ClearFailures, edit::Claim, edit::WorkerFault,
    edit::WorkerFailed, edit::DrainWorker, edit::KeepTrainer, edit::LendThreads, edit::CreateStudy,
    edit::TakeUpStudy, edit::InterruptStoredStudy, edit::SaveAccounts>;

struct Edit {
  std::vector<EditOp> ops;
  // Work for the study driver once the ops are applied: `next` before what waits in its queue (a
  // searcher's operations, in their order), `later` after it.
  std::vector<Work> next, later;
  // (peer, message), sent once the transaction has committed.
  std::vector<std::pair<std::string, json>> sends;
  // Messages already in their wire form (a job, whose size was checked), sent after `sends`.
  std::vector<std::pair<std::string, std::string>> bodies;

  template <typename Op>
  Edit& add(Op op) {
    ops.emplace_back(std::move(op));
    return *this;
  }
  bool empty() const {
    return ops.empty() && next.empty() && later.empty() && sends.empty() && bodies.empty();
  }
};

}  // namespace hippo::master
