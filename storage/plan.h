// The search plan: the master's persistent state (studies, trials, stages, evaluation requests,
// checkpoints, metrics, searcher state, events) in one SQLite file. It is the single source of
// truth: the master writes a transition here before acting on it, so a restarted master resumes
// from load_tree() and the reads below.
//
// Guarantees.
//   - Every public write is atomic on its own; several writes inside transaction() commit together
//     or not at all. A write that throws leaves the file as it was before the write.
//   - Bad input (an unknown id, a duplicate study name, a conflicting metric) throws
//     std::invalid_argument naming the problem; SQLite failures (not a database, locked past the
//     busy timeout, a newer schema, disk errors) throw std::runtime_error naming the file and the
//     SQLite message. Locked past the busy timeout is a PlanBusy (a std::runtime_error): the
//     write changed nothing and may be retried once the other process lets go of the lock.
//   - Durability: WAL with synchronous=FULL. A commit is on disk (the WAL fsynced) when it
//     returns, so it survives a crash of any process and a power loss or OS crash as well: a
//     study acknowledged to a client, a cancel, a checkpoint row whose file then goes, are never
//     undone by a restart. It costs one fsync per commit (about 4-5 ms on the dev machine's
//     virtual disk; 2-5% of `hippo run`'s wall time on examples/fmnist-mlp-ci.json, near
//     the run-to-run spread; storage/README.md), and bounds a master at a few hundred commits/s.
//
// One SearchPlan is one connection and must be used by one thread at a time. Several processes
// may open the same file: readers never block, a writer waits up to the busy timeout for another.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <nlohmann/json.hpp>
#include <optional>
#include <stdexcept>
#include <string>
#include <unordered_map>
#include <vector>

#include "stagetree/tree.h"

struct sqlite3;

namespace hippo {

// Another process held the write lock for longer than the busy timeout.
struct PlanBusy : std::runtime_error {
  using std::runtime_error::runtime_error;
};

enum class Policy { kShared, kTrialBased };
// interrupted: the run that had it stopped before it ended (Ctrl-C, a signal, a crash that the
// next run found); it can be resumed where it stopped.
enum class StudyStatus { kRunning, kDone, kFailed, kCancelled, kInterrupted };
// diverged: its metric was NaN or infinite at an evaluation (a result, not an error).
enum class TrialStatus { kPending, kRunning, kDone, kStopped, kFailed, kDiverged };
// What a job did: trained its steps, trained them again to rebuild a lost state (a replay), or
// only evaluated a state (from == to).
enum class ExecutionKind { kTrain, kReplay, kEvaluate };
// How a job ended: its done came, it failed, it was abandoned (no running study needed it), or
// its worker was lost (silent past the timeout, or said hello again).
enum class ExecutionOutcome { kDone, kFailed, kAbandoned, kLost };

// The names stored in the file and shown to users: "shared", "trial-based"; "running", ...
const char* to_string(Policy policy);
const char* to_string(StudyStatus status);
const char* to_string(TrialStatus status);
const char* to_string(ExecutionKind kind);
const char* to_string(ExecutionOutcome outcome);
// Inverses; throw std::invalid_argument naming the unknown text.
Policy parse_policy(const std::string& text);
StudyStatus parse_study_status(const std::string& text);
TrialStatus parse_trial_status(const std::string& text);
ExecutionKind parse_execution_kind(const std::string& text);
ExecutionOutcome parse_execution_outcome(const std::string& text);
// How users name a study: by its name, or by its id written "#N" or as digits alone (and then only
// when no study has it as a name: protocol/names.h). The id such a text stands for, if any.
std::optional<int64_t> study_id_in(const std::string& text);

// What was spent on a study, over every master that ran it (schema version 7): steps the workers
// executed for it (redone ones included), their busy seconds, checkpoint bytes fetched between
// storages and the seconds that took, the masters' CPU seconds, and the seconds some master ran
// it (its wall time: a restart's outage is not in it).
struct StudyAccount {
  int64_t steps_executed = 0;
  double busy_s = 0;
  int64_t bytes_moved = 0;
  double transfer_s = 0;
  double master_s = 0;
  double run_s = 0;     // the seconds some master ran it ("active")
  double paused_s = 0;  // the seconds it was interrupted, until resumed (schema 12)
  bool operator==(const StudyAccount&) const = default;
};

struct StudyRow {
  int64_t id = 0;
  std::string name;
  nlohmann::json spec;
  Policy policy = Policy::kShared;
  StudyStatus status = StudyStatus::kRunning;
  double created_at = 0;             // unix seconds
  std::optional<double> ended_at;    // set when the status leaves running
  nlohmann::json searcher_state;     // null until the searcher first saves
  std::string error;                 // why a failed study failed
  std::optional<double> deleted_at;  // deleted studies are hidden from studies()
  StudyAccount account;
  // Schema 14: it had ended done when some of its evaluations were distrusted; once its trials
  // have measured them again (TrialRow::remeasure), it ends done again.
  bool remeasure = false;
};

struct TrialRow {
  TrialId id = 0;  // the StageTree's id, global over all studies
  int64_t study_id = 0;
  int64_t number = 0;  // 1, 2, ... within its study, in creation order
  std::string root_key;
  nlohmann::json params;  // what the searcher sampled, e.g. {"lr.init": 0.05}
  Hyperparams hyperparams;
  int64_t length = 0;  // the trial needs steps [0, length)
  TrialStatus status = TrialStatus::kPending;
  std::string end_reason;  // e.g. "stopped by sha at rung 1"
  // Where a trial that ended before its length ended (diverged, stopped, failed), if it did.
  std::optional<int64_t> end_step;
  // Unix seconds: when it entered the plan, and when it ended (nullopt while pending or running,
  // and for trials that ended under a plan schema before 13).
  double created_at = 0;
  std::optional<double> ended_at;
  // Schema 14: it was done when some of its evaluations were distrusted; it runs again to
  // measure them, without telling its searcher (which saw them and decided already).
  bool remeasure = false;
};

struct MetricRow {
  TrialId trial = 0;
  int64_t step = 0;  // the metric was measured after this many steps
  std::string name;
  double value = 0;  // may be NaN (a diverged loss)
  // Provenance (schema 14): the key of the worker that measured it, and the keys of every worker
  // whose work it rests on (its state's lineage and the producer), space-separated and sorted;
  // '' when unknown (older rows). Not part of equality: the same value from another worker is
  // the same metric.
  std::string producer{}, lineage{};
  bool operator==(const MetricRow&) const;  // NaN equals NaN
};

// The key that owns a storage (schema version 10): its Z85 public key ("" for anonymous peers,
// --insecure), the key's name for people, and since when.
struct StorageOwnerRow {
  std::string storage;
  std::string key;
  std::string key_name;
  double since = 0;
  bool operator==(const StorageOwnerRow&) const = default;
};

struct CheckpointRow {
  int64_t id = 0;  // assigned by add_checkpoint
  StageId stage = kNoStage;
  int64_t step = 0;  // the state after this many steps, start < step <= end of the stage
  std::string file;  // relative to the checkpoint store
  int64_t size = 0;  // bytes
  std::string checksum;
  double created_at = 0;  // assigned by add_checkpoint
  // When no running study needed it any more and it was kept for later studies (unset: a running
  // study needs it). master/retention.h.
  std::optional<double> retained_at{};
  // The storages that hold its file (schema version 6), sorted; empty: the master's own directory.
  std::vector<std::string> storages{};
  // The environment its state was computed in (schema version 9; master/running_job.h's
  // worker_environment); "" when unknown (written before).
  std::string environment{};
  // Provenance (schema 14): the key of the worker that wrote it, and the keys of every worker
  // whose work it rests on (its producer's and its parent state's lineage), space-separated and
  // sorted; '' when unknown (older rows, or a state the master itself made).
  std::string producer{}, lineage{};
};

// One job a worker ran (schema version 3): what `hippo dashboard` draws on its timeline.
struct ExecutionRow {
  int64_t id = 0;            // assigned by add_execution
  StageId stage = kNoStage;  // the stage of its first step, when it ended
  TrialId trial = -1;        // the trial whose path it trained (the stage's representative)
  ExecutionKind kind = ExecutionKind::kTrain;
  int64_t from = 0;     // it was given the state after `from` steps ...
  int64_t to = 0;       // ... and trained it to `to` (from == to: an evaluation only)
  int64_t reached = 0;  // the step it got to: `to` when done, the last one heard of otherwise
  std::string worker;   // the worker's name
  double started_at = 0, ended_at = 0;  // unix seconds
  ExecutionOutcome outcome = ExecutionOutcome::kDone;
  std::string error;             // why it failed
  std::vector<int64_t> studies;  // the studies whose trials needed it, ascending
  // Schema version 8, a job that finished: the seconds it took on its worker, and their parts as
  // the worker reported them ({"train": s, ...}: protocol::JobTimes; time_split.h), with the
  // evaluations it ran ("evaluations": the master's count of the states whose metrics came).
  std::optional<double> busy_s{};
  nlohmann::json times = nlohmann::json::object();
};

// A job running now (schema version 12): from the commit that sends it to the one that records
// its end. `counted`: its steps are in its studies' accounts up to this step.
struct RunningJobRow {
  std::string incarnation;  // of the master that gave it
  int64_t job = 0;          // that master's number for it
  std::string worker;       // the worker's name
  TrialId trial = -1;
  ExecutionKind kind = ExecutionKind::kTrain;
  int64_t from = 0, to = 0, counted = 0;
  std::vector<int64_t> studies;
  // The checkpoint files it was ordered to write, by step: those past `counted` may be written
  // without a master having heard of them (a restarted master keeps them for the worker's word).
  std::vector<std::pair<int64_t, std::string>> files;
  double started_at = 0;
  bool operator==(const RunningJobRow&) const = default;
};

// An event the master fed a study's searcher since its state was last saved (schema version 5):
// its validation of a trial at a step (value: the metric, NaN allowed), a trial closed or failed,
// or a batch of held-back operations taken (next_batch).
// Trials' values as parsed from the plan, by trial id, kept by a reader that reads the same plan
// again and again (the dashboard): a trial's params and hyperparams never change once stored,
// and parsing their JSON is most of the cost of reading a large study.
struct ParsedTrialValues {
  std::unordered_map<TrialId, nlohmann::json> params;
  std::unordered_map<TrialId, Hyperparams> hyperparams;
};

// The stage tree of one study's root keys (SearchPlan::load_study_tree): a whole tree of its own,
// its stages numbered 0, 1, ... in the plan's order.
struct StudyTree {
  StageTree tree;
  std::vector<StageId> plan_ids;  // the plan's id of each of its stages
};

// What changed in a plan since a change number (schema 15, storage/schema.cc's change marks):
// what a reader that keeps what it read (the dashboard) needs to read again.
struct PlanChanges {
  int64_t number = 0;                      // the plan's change number now
  std::vector<TrialRow> trials;            // changed since (added, or a metric of theirs), by id
  std::vector<MetricRow> metrics;          // every metric of those trials, by (trial, step, name)
  std::vector<Stage> stages;               // changed since (or a checkpoint of theirs), by id;
                                           // their children are not filled in
  std::vector<CheckpointRow> checkpoints;  // every checkpoint of those stages, by (stage, step)
};

struct SearcherEvent {
  enum class Kind { kValidation, kClosed, kFailed, kBatch };
  Kind kind = Kind::kValidation;
  int64_t trial = 0;  // the searcher's request id
  int64_t step = 0;
  double value = 0;  // what a searcher of one objective sees (searchers/searcher.h, Evaluation)
  // With several objectives or constraints: every objective's value and the constraints'
  // violation; empty for a study of one metric and mode, whose `value` is all there is.
  std::vector<double> values;
  double violation = 0;
  bool operator==(const SearcherEvent&) const;  // NaN equals NaN
};

struct EventRow {
  int64_t id = 0;
  double time = 0;
  std::optional<int64_t> study;  // nullopt for events of the whole system (a worker joined)
  std::string kind;
  nlohmann::json detail;
};

class SearchPlan {
 public:
  struct Options {
    int busy_timeout_ms = 5000;  // how long a write waits for another process's write lock
    // false: a commit returns before it is on disk (SQLite's synchronous = OFF), for a plan that
    // is thrown away after the process (`hippo simulate`): a power loss may lose it whole.
    bool durable = true;
    // true: the database lives in this process's memory, and reaches `path` only through
    // save_copy (for `hippo simulate`, whose plan no other process reads while it runs: no
    // commit writes a file).
    bool in_memory = false;
  };

  // Creates the file or opens it and migrates it to the latest schema version. Throws
  // std::runtime_error, leaving the file unchanged, if it is not a SQLite database or has a newer
  // schema version than this binary.
  static SearchPlan open(const std::string& path, const Options& options);
  static SearchPlan open(const std::string& path) { return open(path, Options{}); }
  // Opens an existing file for reading only (the dashboard): SQLite refuses every write on this
  // connection, nothing is migrated, and a reader never blocks a master writing the file (WAL).
  // A file at version 2 (before executions) is read as it is: executions() is empty. Throws
  // std::runtime_error for a missing file, a file that is not a plan, or a newer version.
  static SearchPlan open_read_only(const std::string& path);

  SearchPlan(SearchPlan&&) noexcept;
  SearchPlan& operator=(SearchPlan&&) noexcept;
  ~SearchPlan();

  const std::string& path() const { return path_; }
  // Writes the whole database, compacted, to a new file at `path` (SQLite's VACUUM INTO); an
  // in-memory plan's way to a file. Throws std::runtime_error if it exists or cannot be written.
  void save_copy(const std::string& path);
  int schema_version();
  // How long a write waits for another process's write lock; returns the previous value.
  int set_busy_timeout(int ms);

  // Runs fn in one transaction: commits when it returns, rolls back everything it wrote and
  // rethrows when it throws. A nested call joins the outer transaction (as a savepoint: its own
  // writes are undone if it throws, and the outer one decides about the rest). An in-memory
  // StageTree changed inside a failed transaction is ahead of the file: reload it (load_tree).
  void transaction(const std::function<void()>& fn);
  // Runs fn's reads in one read transaction: they all see the file as it was at its first read,
  // whatever other processes commit meanwhile. It takes no lock that a writer waits for.
  void snapshot(const std::function<void()>& fn);
  // A number that changes whenever another connection (process) has committed to the file since
  // this one last looked: a cheap "has anything changed?" (SQLite's PRAGMA data_version).
  int64_t data_version();
  // Runs `action` once the current transaction has committed, or at once outside a transaction;
  // never if the transaction rolls back, nor if the nested transaction (savepoint) it was given
  // in does. For what follows a commit and cannot be undone: removing the file of a checkpoint
  // whose row goes (removed before the commit, a rollback would leave a row without its file).
  // Actions run in the order given and must not throw.
  void after_commit(std::function<void()> action);

  // Studies. create_study throws std::invalid_argument if a study that is not deleted has the name.
  int64_t create_study(const std::string& name, const nlohmann::json& spec, Policy policy);
  // Any status but running sets ended_at (running clears it: a resumed study); error says why a
  // study ended (empty for none).
  void set_study_status(int64_t study, StudyStatus status, const std::string& error = "");
  // Replaces the study's accounting (StudyAccount: the master keeps the totals).
  void set_study_account(int64_t study, const StudyAccount& account);
  // Saves the searcher's whole state, which includes every event fed to it: the study's searcher
  // events are deleted.
  void save_searcher_state(int64_t study, const nlohmann::json& state);
  // Appends an event fed to the study's searcher after its saved state.
  void add_searcher_event(int64_t study, const SearcherEvent& event);
  // The events since the saved state, in the order they were added (none before version 5).
  std::vector<SearcherEvent> searcher_events(int64_t study);
  // Hides a study (deleted_at: its name is free again) and removes what only it needed: its
  // evaluation requests, searcher state and events, and its log of events. Its trials, their
  // metrics and the stages stay: the tree is shared, and later studies reuse their evaluations.
  void delete_study(int64_t study);
  // An interrupted study runs again: std::invalid_argument (and nothing written) for one that is
  // not interrupted, or deleted, when the statement runs.
  void resume_study(int64_t study);

  // Not deleted, by id; without their searcher states (left null) when `searcher_state` is false:
  // a state grows with its study, and a reader that never shows it (the dashboard) need not
  // parse it at every read.
  std::vector<StudyRow> studies(bool searcher_state = true);
  std::optional<StudyRow> study(int64_t id);                       // deleted ones too
  std::optional<StudyRow> study_by_name(const std::string& name);  // not deleted

  // Trials. add_trial stores row (its number is ignored) and returns the number given to it
  // within its study. The status starts as row.status.
  int64_t add_trial(const TrialRow& row);
  TrialId next_trial_id();  // one past the largest id stored, 0 for none
  void set_trial_length(TrialId trial, int64_t length);
  void set_trial_status(TrialId trial, TrialStatus status, const std::string& end_reason = "",
                        std::optional<int64_t> end_step = std::nullopt);
  // By number; values already in `parsed` are taken from it, the others parsed and added to it.
  std::vector<TrialRow> trials(int64_t study, ParsedTrialValues* parsed = nullptr);
  std::optional<TrialRow> trial(TrialId id);

  // Evaluation requests: "evaluate this trial after `step` steps". Adding one twice is a no-op.
  void add_eval_requests(TrialId trial, const std::vector<int64_t>& steps);
  std::vector<int64_t> eval_requests(TrialId trial);  // ascending

  // Checkpoints. add_checkpoint returns the new id; delete_checkpoint throws for an unknown id.
  int64_t add_checkpoint(const CheckpointRow& row);
  void delete_checkpoint(int64_t id);
  // Marks a checkpoint as kept for later studies since `retained_at` (nullopt: a running study
  // needs it again); throws for an unknown id.
  void set_checkpoint_retained(int64_t id, std::optional<double> retained_at);
  // The storages that hold a checkpoint's file now (a fetch added one, a lost copy went).
  void set_checkpoint_storages(int64_t id, const std::vector<std::string>& storages);
  std::vector<CheckpointRow> checkpoints();  // by (stage, step)
  // Provenance (schema 14): the checkpoints and metrics whose lineage holds `key`.
  std::vector<CheckpointRow> checkpoints_resting_on(const std::string& key);
  std::vector<MetricRow> metrics_resting_on(const std::string& key);
  // A distrusted metric goes (throws std::invalid_argument for one that is not there).
  void delete_metric(TrialId trial, int64_t step, const std::string& name);
  // A trial that was done runs again to measure distrusted evaluations (TrialRow::remeasure); a
  // study that was done or interrupted is interrupted, saying `why` (remeasure when it was done:
  // StudyRow::remeasure). Both throw std::invalid_argument, writing nothing, for another status.
  void reopen_trial_to_remeasure(TrialId trial);
  void interrupt_study_to_remeasure(int64_t study, const std::string& why);

  // Storage owners (schema version 10): the key that first named each storage. Setting the owner
  // of a storage that has one already changes nothing (the first key keeps it).
  void set_storage_owner(const StorageOwnerRow& row);
  std::vector<StorageOwnerRow> storage_owners();  // by storage; none in a file before version 10

  // Metrics. Adding the same (trial, step, name) with the same value again is a no-op (a worker
  // resending after a lost acknowledgement); with a different value it throws
  // std::invalid_argument and stores nothing.
  // A metric measured again with another value keeps the first: the returned text says so
  // (nullopt when the row was written, or was there with the same value).
  std::optional<std::string> add_metric(const MetricRow& row);
  // Every metric of every trial, a deleted study's too (its trials stay in the tree), by trial.
  std::vector<MetricRow> every_metric();
  std::vector<MetricRow> metrics(TrialId trial);        // by (step, name)
  std::vector<MetricRow> study_metrics(int64_t study);  // by (trial, step, name)

  // Executions: what the workers ran. add_execution throws std::invalid_argument (and stores
  // nothing) for an unknown trial or study, or steps or times out of order; it returns the id.
  int64_t add_execution(const ExecutionRow& row);
  // Those that served `study` (every one for nullopt), by start time; only those whose id is
  // above `after`, if given (executions are only ever added, with rising ids).
  std::vector<ExecutionRow> executions(std::optional<int64_t> study,
                                       std::optional<int64_t> after = std::nullopt);

  // Running jobs (RunningJobRow): added when a job is sent, updated as its steps are counted or
  // its worker is told to write one more file, deleted when its end is recorded.
  void add_running_job(const RunningJobRow& row);
  void set_running_job_counted(const std::string& incarnation, int64_t job, int64_t counted);
  void add_running_job_file(const std::string& incarnation, int64_t job, int64_t step,
                            const std::string& file);
  void delete_running_job(const std::string& incarnation, int64_t job);
  std::vector<RunningJobRow> running_jobs();  // none in a file before version 12

  // Events: an append-only log of what happened.
  void add_event(std::optional<int64_t> study, const std::string& kind,
                 const nlohmann::json& detail);
  // The last `limit` events (of one study, or of all when study is nullopt), oldest first.
  std::vector<EventRow> events(std::optional<int64_t> study, int64_t limit);
  // Every event of one kind, oldest first.
  std::vector<EventRow> events_of_kind(const std::string& kind);
  // The newest event of one kind of a study, if any (the master's recorded `summary` of a study).
  std::optional<EventRow> last_event(int64_t study, const std::string& kind);

  // The stage tree. Trials are stored by add_trial (and their lengths by set_trial_length);
  // these store the stages. save_tree writes every stage; save_change writes only those that
  // `change` touched (created, extended, split, and the re-parented children of each split's
  // upper part) and moves the checkpoints above each split point to the upper part. Call them in
  // the same transaction as the add_trial / set_trial_length that made the change.
  void save_tree(const StageTree& tree);
  void save_change(const StageTree& tree, const Change& change);
  void save_stage(const Stage& stage);  // insert or update by id (e.g. after mark_trained)
  // Rebuilds the tree from every stored stage and trial (StageTree::restore); `parsed` as for
  // trials().
  StageTree load_tree(ParsedTrialValues* parsed = nullptr);
  // The part of the tree that `study`'s trials live in, for a reader of one study (`hippo
  // report`) that needs no other: every stage and trial of their root keys (a root key's stages
  // never join another's, so this is a whole tree), stages renumbered. `parsed` as for trials().
  StudyTree load_study_tree(int64_t study, ParsedTrialValues* parsed = nullptr);
  // The checkpoints of the stages load_study_tree reads (by the plan's stage ids), by (stage,
  // step).
  std::vector<CheckpointRow> study_tree_checkpoints(int64_t study);

  // Change marks (schema 15). Whether this file has them (a read-only older file has not).
  bool has_change_marks();
  // The trials, metrics, stages and checkpoints changed since change number `since` (every one
  // for a negative number), in one read; `parsed` as for trials(). Throws std::runtime_error
  // without change marks.
  PlanChanges changes_since(int64_t since, ParsedTrialValues* parsed = nullptr);

 private:
  class Statement;
  class Query;

  explicit SearchPlan(std::string path);
  void migrate();
  // transaction() with the given BEGIN statement ("BEGIN" for a read snapshot).
  void in_transaction(const char* begin, const std::function<void()>& fn);
  // transaction() for fn whose one write is a single statement: its reads before it and its
  // checks after it (of a write that changed nothing) leave nothing to undo, and a statement that
  // fails undoes itself, so inside an open transaction fn needs no savepoint (a master writes
  // a few rows per message, each in a savepoint of its own was a tenth of its time).
  void single_write(const std::function<void()>& fn);
  void exec(const char* sql);  // statements without parameters or results
  // One statement without parameters or results, compiled once (BEGIN, COMMIT, SAVEPOINT...: a
  // master runs them for every message).
  void run(const char* sql);
  Statement& prepare(const std::string& sql);         // compiled once, kept for the connection
  bool exists(const std::string& table, int64_t id);  // a row with this id
  [[noreturn]] void fail(const std::string& what);
  // After a write that a constraint refused (Query::refused): std::invalid_argument(missing) when
  // `table` has no row `id` (the check that the write would otherwise run every time), else
  // std::runtime_error naming `what` and SQLite's refusal.
  [[noreturn]] void explain_refusal(const std::string& refusal, const std::string& what,
                                    const std::string& table, int64_t id,
                                    const std::string& missing);
  // The columns read_study and read_trial read, for this file's schema version.
  std::string study_columns(bool searcher_state = true);
  std::string trial_columns();
  StudyRow read_study(Query& q);
  TrialRow read_trial(Query& q, ParsedTrialValues* parsed = nullptr);
  std::string metric_columns();
  std::vector<MetricRow> read_metrics(Query& q);
  template <typename... Args>
  std::vector<CheckpointRow> read_checkpoints(const std::string& where, const Args&... args);
  std::vector<Stage> read_stages(const std::string& where, int64_t arg);
  // load_tree (every stage and trial), or load_study_tree.
  StudyTree read_tree(std::optional<int64_t> study, ParsedTrialValues* parsed);

  std::string path_;
  bool in_memory_ = false;  // Options::in_memory
  sqlite3* db_ = nullptr;
  int version_ = 0;                                  // the schema version, once opened
  int depth_ = 0;                                    // transaction() nesting
  std::vector<std::function<void()>> after_commit_;  // of the open transaction, in order
  int busy_timeout_ms_ = 0;
  std::unordered_map<std::string, std::unique_ptr<Statement>> statements_;
};

}  // namespace hippo
