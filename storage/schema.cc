#include "storage/schema.h"

namespace hippo {

// Times are unix seconds (REAL). JSON columns hold nlohmann::json::dump() text. Status columns are
// checked here too, so that no writer (not even a hand-run sqlite3 shell) stores a state the
// master cannot read back.
static const char* const kVersion1 = R"sql(
CREATE TABLE studies (
  id INTEGER PRIMARY KEY,
  name TEXT NOT NULL,
  spec TEXT NOT NULL,
  policy TEXT NOT NULL CHECK (policy IN ('shared', 'trial-based')),
  status TEXT NOT NULL CHECK (status IN ('running', 'done', 'failed', 'cancelled')),
  created_at REAL NOT NULL,
  ended_at REAL,
  searcher_state TEXT,
  error TEXT
);
CREATE UNIQUE INDEX studies_by_name ON studies (name);

-- id is the StageTree's TrialId, global over all studies.
CREATE TABLE trials (
  id INTEGER PRIMARY KEY,
  study_id INTEGER NOT NULL REFERENCES studies (id),
  number INTEGER NOT NULL CHECK (number >= 1),
  root_key TEXT NOT NULL,
  params TEXT NOT NULL,
  hyperparams TEXT NOT NULL,
  length INTEGER NOT NULL CHECK (length >= 1),
  status TEXT NOT NULL CHECK (status IN ('pending', 'running', 'done', 'stopped', 'failed')),
  end_reason TEXT,
  created_at REAL NOT NULL,
  UNIQUE (study_id, number)
);

-- id is the StageTree's StageId. The references are checked at commit, because one change of the
-- tree (a split) re-parents old stages onto a new stage whose row is written after them.
CREATE TABLE stages (
  id INTEGER PRIMARY KEY,
  root_key TEXT NOT NULL,
  parent INTEGER REFERENCES stages (id) DEFERRABLE INITIALLY DEFERRED,
  start_step INTEGER NOT NULL CHECK (start_step >= 0),
  end_step INTEGER NOT NULL CHECK (end_step > start_step),
  trained_until INTEGER NOT NULL,
  representative INTEGER NOT NULL REFERENCES trials (id) DEFERRABLE INITIALLY DEFERRED
);

CREATE TABLE eval_requests (
  trial_id INTEGER NOT NULL REFERENCES trials (id),
  step INTEGER NOT NULL CHECK (step >= 0),
  PRIMARY KEY (trial_id, step)
) WITHOUT ROWID;

CREATE TABLE checkpoints (
  id INTEGER PRIMARY KEY,
  stage_id INTEGER NOT NULL REFERENCES stages (id),
  step INTEGER NOT NULL,
  file TEXT NOT NULL UNIQUE,
  size INTEGER NOT NULL CHECK (size >= 0),
  checksum TEXT NOT NULL,
  created_at REAL NOT NULL,
  UNIQUE (stage_id, step)
);

-- value NULL stands for NaN: SQLite stores a bound NaN as NULL.
CREATE TABLE metrics (
  trial_id INTEGER NOT NULL REFERENCES trials (id),
  step INTEGER NOT NULL,
  name TEXT NOT NULL,
  value REAL,
  PRIMARY KEY (trial_id, step, name)
) WITHOUT ROWID;

CREATE TABLE events (
  id INTEGER PRIMARY KEY,
  time REAL NOT NULL,
  study_id INTEGER REFERENCES studies (id),
  kind TEXT NOT NULL,
  detail TEXT NOT NULL
);
CREATE INDEX events_by_study ON events (study_id, id);
)sql";

// Version 2: studies can be deleted (hidden, their trials kept because other studies may share
// their stages), which frees the name for a new study.
static const char* const kVersion2 = R"sql(
ALTER TABLE studies ADD COLUMN deleted_at REAL;
DROP INDEX studies_by_name;
CREATE UNIQUE INDEX studies_by_name ON studies (name) WHERE deleted_at IS NULL;
)sql";

// Version 3: what each worker ran when (the dashboard's timeline). One row per job that ended:
// the stage of its first step and the trial whose path it trained (the stage's representative
// then: a later split gives the upper steps a new stage id, the trial's path stays), the steps it
// was given [from_step, to_step) and how far it got, done / failed / abandoned / lost. A job
// serves every study whose trials need its stages: execution_studies says which.
static const char* const kVersion3 = R"sql(
CREATE TABLE executions (
  id INTEGER PRIMARY KEY,
  stage_id INTEGER NOT NULL,
  trial_id INTEGER NOT NULL REFERENCES trials (id),
  kind TEXT NOT NULL CHECK (kind IN ('train', 'replay', 'evaluate')),
  from_step INTEGER NOT NULL CHECK (from_step >= 0),
  to_step INTEGER NOT NULL CHECK (to_step >= from_step),
  reached_step INTEGER NOT NULL CHECK (reached_step >= from_step AND reached_step <= to_step),
  worker TEXT NOT NULL,
  started_at REAL NOT NULL,
  ended_at REAL NOT NULL CHECK (ended_at >= started_at),
  outcome TEXT NOT NULL CHECK (outcome IN ('done', 'failed', 'abandoned', 'lost')),
  error TEXT
);
CREATE TABLE execution_studies (
  execution_id INTEGER NOT NULL REFERENCES executions (id),
  study_id INTEGER NOT NULL REFERENCES studies (id),
  PRIMARY KEY (execution_id, study_id)
) WITHOUT ROWID;
CREATE INDEX execution_studies_by_study ON execution_studies (study_id);
)sql";

// Version 4: checkpoints kept for later studies (master/retention.h). retained_at is when no
// running study needed the state any more and the master kept it under its disk budget (the
// recency of its value); NULL for a state that a running study needs.
static const char* const kVersion4 = R"sql(
ALTER TABLE checkpoints ADD COLUMN retained_at REAL;
)sql";

// Version 5: the searcher events since a study's last saved searcher state. The master saves a
// searcher's whole state only now and then (its size grows with the study), and in between
// appends each event it feeds the searcher; a restarted master loads the state and feeds the
// events again, in order (master/study_driver.h). Saving the state deletes the study's events.
// value is NULL for NaN.
static const char* const kVersion5 = R"sql(
CREATE TABLE searcher_events (
  study_id INTEGER NOT NULL REFERENCES studies (id),
  seq INTEGER NOT NULL,
  kind TEXT NOT NULL CHECK (kind IN ('validation', 'closed', 'failed', 'batch')),
  trial INTEGER NOT NULL,
  step INTEGER NOT NULL,
  value REAL,
  PRIMARY KEY (study_id, seq)
) WITHOUT ROWID;
)sql";

// Version 6: the storages that hold a checkpoint's file (a space-separated list of storage
// identities, protocol/checkpoint_storage.h): where the worker that wrote it keeps its files, and
// every storage it was fetched to since. '' (every row before version 6): the master's own
// checkpoint directory.
static const char* const kVersion6 = R"sql(
ALTER TABLE checkpoints ADD COLUMN storages TEXT NOT NULL DEFAULT '';
)sql";

// Version 7: every study ends and says why. A trial whose metric became NaN or infinite is
// 'diverged', and trials.end_step says where a trial ended early (diverged, stopped, failed); a
// study a run left unfinished (Ctrl-C, a signal, a crash seen by the next run) is 'interrupted'
// and can be resumed. A study's account (what the workers executed for it, their busy time, the
// bytes fetched, the master's CPU time, and the seconds some master ran it) has a row of its own
// in study_accounts, written with each commit that changes it, so that a restarted master
// reports the whole study (a small row: rewriting the study's own, with its searcher state, at
// every commit was quadratic). SQLite cannot change a CHECK constraint: studies and trials are
// rebuilt (SQLite's "12 steps": the migration runs with foreign keys off and is checked with
// foreign_key_check before it commits, plan.cc).
static const char* const kVersion7 = R"sql(
CREATE TABLE studies_v7 (
  id INTEGER PRIMARY KEY,
  name TEXT NOT NULL,
  spec TEXT NOT NULL,
  policy TEXT NOT NULL CHECK (policy IN ('shared', 'trial-based')),
  status TEXT NOT NULL
    CHECK (status IN ('running', 'done', 'failed', 'cancelled', 'interrupted')),
  created_at REAL NOT NULL,
  ended_at REAL,
  searcher_state TEXT,
  error TEXT,
  deleted_at REAL
);
INSERT INTO studies_v7 SELECT id, name, spec, policy, status, created_at, ended_at, searcher_state,
                              error, deleted_at FROM studies;
DROP TABLE studies;
ALTER TABLE studies_v7 RENAME TO studies;
CREATE UNIQUE INDEX studies_by_name ON studies (name) WHERE deleted_at IS NULL;

CREATE TABLE study_accounts (
  study_id INTEGER PRIMARY KEY REFERENCES studies (id),
  steps_executed INTEGER NOT NULL CHECK (steps_executed >= 0),
  busy_s REAL NOT NULL,
  bytes_moved INTEGER NOT NULL,
  transfer_s REAL NOT NULL,
  master_s REAL NOT NULL,
  run_s REAL NOT NULL
);
INSERT INTO study_accounts SELECT id, 0, 0, 0, 0, 0, COALESCE(ended_at - created_at, 0) FROM studies;

CREATE TABLE trials_v7 (
  id INTEGER PRIMARY KEY,
  study_id INTEGER NOT NULL REFERENCES studies (id),
  number INTEGER NOT NULL CHECK (number >= 1),
  root_key TEXT NOT NULL,
  params TEXT NOT NULL,
  hyperparams TEXT NOT NULL,
  length INTEGER NOT NULL CHECK (length >= 1),
  status TEXT NOT NULL
    CHECK (status IN ('pending', 'running', 'done', 'stopped', 'failed', 'diverged')),
  end_reason TEXT,
  created_at REAL NOT NULL,
  end_step INTEGER CHECK (end_step >= 0),
  UNIQUE (study_id, number)
);
INSERT INTO trials_v7 (id, study_id, number, root_key, params, hyperparams, length, status,
                       end_reason, created_at)
  SELECT id, study_id, number, root_key, params, hyperparams, length, status, end_reason,
         created_at FROM trials;
DROP TABLE trials;
ALTER TABLE trials_v7 RENAME TO trials;
)sql";

// Version 8: where each execution's time went on its worker (busy_s, and its parts as the
// worker reported them: JSON of {start, setup, load, fetch, train, eval, save}); NULL for jobs
// that did not finish and for rows written before.
static const char* const kVersion8 = R"sql(
ALTER TABLE executions ADD COLUMN busy_s REAL CHECK (busy_s >= 0);
ALTER TABLE executions ADD COLUMN times TEXT;
)sql";

// Version 9: the environment each checkpoint's state was computed in (worker/environment.h); ''
// for rows written before, which any worker may go on from.
static const char* const kVersion9 = R"sql(
ALTER TABLE checkpoints ADD COLUMN environment TEXT NOT NULL DEFAULT '';
)sql";

// Version 10: which key owns each storage (a worker checkpoint directory, by the identity in its
// .hippo-storage): the key of the first worker that named it in a hello. A worker of another key
// that names it is refused (master/storages.h). `key` is the Z85 public key ('' where the master
// admits anonymous peers: --insecure).
static const char* const kVersion10 = R"sql(
CREATE TABLE storage_owners (
  storage TEXT PRIMARY KEY,
  key TEXT NOT NULL,
  key_name TEXT NOT NULL,
  since REAL NOT NULL
);
)sql";

// Version 11: a searcher event's evaluation when its study has several objectives or constraints:
// JSON {"values": [each objective's], "violation": V} (a non-finite number as "inf", "-inf" or
// "nan"); NULL for a study of one metric and mode, whose `value` is all there is.
static const char* const kVersion11 = R"sql(
ALTER TABLE searcher_events ADD COLUMN evaluation TEXT;
)sql";

// Version 12: the jobs running now, one row each from the commit that sends a job to the one
// that records its end (an execution): its master's incarnation and job id, its worker, the
// trial's path [from_step, to_step) it trains, the studies it serves (JSON list), the step up to
// which its steps are counted in their accounts (`counted`), and the checkpoint files it was
// ordered to write (JSON list: a restarted master keeps them until the worker says what became of
// them). A master that restarts finds here the jobs of the one before: the worker's record of
// each (protocol::DroppedJob) is adopted, and the steps past `counted` are counted once.
// study_accounts.paused_s: the seconds a study spent interrupted before it was resumed, so that
// its wall time (from submit to end) counts a master's outage and leaves out a pause.
static const char* const kVersion12 = R"sql(
CREATE TABLE running_jobs (
  incarnation TEXT NOT NULL,
  job INTEGER NOT NULL,
  worker TEXT NOT NULL,
  trial_id INTEGER NOT NULL,
  kind TEXT NOT NULL CHECK (kind IN ('train', 'replay', 'evaluate')),
  from_step INTEGER NOT NULL CHECK (from_step >= 0),
  to_step INTEGER NOT NULL CHECK (to_step >= from_step),
  counted INTEGER NOT NULL CHECK (counted >= from_step AND counted <= to_step),
  studies TEXT NOT NULL,
  files TEXT NOT NULL,
  started_at REAL NOT NULL,
  PRIMARY KEY (incarnation, job)
) WITHOUT ROWID;
ALTER TABLE study_accounts ADD COLUMN paused_s REAL NOT NULL DEFAULT 0;
)sql";

// Version 13: when a trial ended (unix seconds; NULL while it is pending or running, and for trials
// that ended before this version): its duration from created_at, in `export --wide` and Python's
// trials_dataframe().
static const char* const kVersion13 = R"sql(
ALTER TABLE trials ADD COLUMN ended_at REAL;
)sql";

// Version 14: provenance. Who produced each state and each metric: `producer`, the Z85 public key
// of the worker that wrote the checkpoint or measured the metric ('anonymous' for a peer of a
// master with --insecure), and `lineage`, the keys of every worker whose work the value rests on
// (the producer's, and those of the states it was trained from), space-separated and sorted. ''
// on older rows: unknown. trials.remeasure: 1 for a trial that was done when evaluations of its
// were distrusted (`hippo checkpoints --produced-by KEY --forget`): a resumed study measures them
// again without telling its searcher, which saw them and decided already. studies.remeasure: 1
// for a study that had ended done then: it ends done again once those are measured.
static const char* const kVersion14 = R"sql(
ALTER TABLE checkpoints ADD COLUMN producer TEXT NOT NULL DEFAULT '';
ALTER TABLE checkpoints ADD COLUMN lineage TEXT NOT NULL DEFAULT '';
ALTER TABLE metrics ADD COLUMN producer TEXT NOT NULL DEFAULT '';
ALTER TABLE metrics ADD COLUMN lineage TEXT NOT NULL DEFAULT '';
ALTER TABLE trials ADD COLUMN remeasure INTEGER NOT NULL DEFAULT 0;
ALTER TABLE studies ADD COLUMN remeasure INTEGER NOT NULL DEFAULT 0;
)sql";

// Version 15: change marks, so that a reader that keeps what it read (the dashboard) reads again
// only what changed. plan_changes holds the plan's change number; every write that changes a
// trial (its row, or a metric of it) or a stage (its row, or a checkpoint of it) raises it by one
// and marks the trial in trial_marks, or the stage in stage_marks, with the new number (no mark:
// not changed since this version). Kept by triggers, so that no writer (not even a hand-run
// sqlite3 shell) changes a row unmarked; in tables of their own, two integers a row, so that a
// mark rewrites no trial's row (a mark in the trial's row cost three times as much).
static const char* const kVersion15 = R"sql(
CREATE TABLE plan_changes (
  id INTEGER PRIMARY KEY CHECK (id = 1),
  number INTEGER NOT NULL
);
INSERT INTO plan_changes VALUES (1, 0);
CREATE TABLE trial_marks (trial_id INTEGER PRIMARY KEY, changed INTEGER NOT NULL);
CREATE TABLE stage_marks (stage_id INTEGER PRIMARY KEY, changed INTEGER NOT NULL);
CREATE INDEX trial_marks_by_change ON trial_marks (changed);
CREATE INDEX stage_marks_by_change ON stage_marks (changed);
CREATE TRIGGER trial_added AFTER INSERT ON trials BEGIN
  UPDATE plan_changes SET number = number + 1;
  INSERT INTO trial_marks VALUES (NEW.id, (SELECT number FROM plan_changes))
    ON CONFLICT (trial_id) DO UPDATE SET changed = excluded.changed;
END;
CREATE TRIGGER trial_updated AFTER UPDATE ON trials BEGIN
  UPDATE plan_changes SET number = number + 1;
  INSERT INTO trial_marks VALUES (NEW.id, (SELECT number FROM plan_changes))
    ON CONFLICT (trial_id) DO UPDATE SET changed = excluded.changed;
END;
CREATE TRIGGER metric_added AFTER INSERT ON metrics BEGIN
  UPDATE plan_changes SET number = number + 1;
  INSERT INTO trial_marks VALUES (NEW.trial_id, (SELECT number FROM plan_changes))
    ON CONFLICT (trial_id) DO UPDATE SET changed = excluded.changed;
END;
CREATE TRIGGER metric_updated AFTER UPDATE ON metrics BEGIN
  UPDATE plan_changes SET number = number + 1;
  INSERT INTO trial_marks VALUES (OLD.trial_id, (SELECT number FROM plan_changes))
    ON CONFLICT (trial_id) DO UPDATE SET changed = excluded.changed;
  INSERT INTO trial_marks VALUES (NEW.trial_id, (SELECT number FROM plan_changes))
    ON CONFLICT (trial_id) DO UPDATE SET changed = excluded.changed;
END;
CREATE TRIGGER metric_deleted AFTER DELETE ON metrics BEGIN
  UPDATE plan_changes SET number = number + 1;
  INSERT INTO trial_marks VALUES (OLD.trial_id, (SELECT number FROM plan_changes))
    ON CONFLICT (trial_id) DO UPDATE SET changed = excluded.changed;
END;
CREATE TRIGGER stage_added AFTER INSERT ON stages BEGIN
  UPDATE plan_changes SET number = number + 1;
  INSERT INTO stage_marks VALUES (NEW.id, (SELECT number FROM plan_changes))
    ON CONFLICT (stage_id) DO UPDATE SET changed = excluded.changed;
END;
CREATE TRIGGER stage_updated AFTER UPDATE ON stages BEGIN
  UPDATE plan_changes SET number = number + 1;
  INSERT INTO stage_marks VALUES (NEW.id, (SELECT number FROM plan_changes))
    ON CONFLICT (stage_id) DO UPDATE SET changed = excluded.changed;
END;
CREATE TRIGGER checkpoint_added AFTER INSERT ON checkpoints BEGIN
  UPDATE plan_changes SET number = number + 1;
  INSERT INTO stage_marks VALUES (NEW.stage_id, (SELECT number FROM plan_changes))
    ON CONFLICT (stage_id) DO UPDATE SET changed = excluded.changed;
END;
CREATE TRIGGER checkpoint_updated AFTER UPDATE ON checkpoints BEGIN
  UPDATE plan_changes SET number = number + 1;
  INSERT INTO stage_marks VALUES (OLD.stage_id, (SELECT number FROM plan_changes))
    ON CONFLICT (stage_id) DO UPDATE SET changed = excluded.changed;
  INSERT INTO stage_marks VALUES (NEW.stage_id, (SELECT number FROM plan_changes))
    ON CONFLICT (stage_id) DO UPDATE SET changed = excluded.changed;
END;
CREATE TRIGGER checkpoint_deleted AFTER DELETE ON checkpoints BEGIN
  UPDATE plan_changes SET number = number + 1;
  INSERT INTO stage_marks VALUES (OLD.stage_id, (SELECT number FROM plan_changes))
    ON CONFLICT (stage_id) DO UPDATE SET changed = excluded.changed;
END;
)sql";

const std::vector<std::string_view>& migrations() {
  static const std::vector<std::string_view> steps = {
      kVersion1, kVersion2,  kVersion3,  kVersion4,  kVersion5,  kVersion6,  kVersion7, kVersion8,
      kVersion9, kVersion10, kVersion11, kVersion12, kVersion13, kVersion14, kVersion15};
  return steps;
}

int latest_schema_version() {
  return static_cast<int>(migrations().size());
}

}  // namespace hippo
