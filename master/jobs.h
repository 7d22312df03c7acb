// Jobs as the master builds and closes them: the order a worker gets for a unit of work, and what
// the plan records when a job trains, reports, or ends. Pure functions of the master's state: the
// master's front sends the orders and applies the edits.
#pragma once

#include <cstdint>
#include <optional>
#include <set>
#include <string>
#include <unordered_map>
#include <vector>

#include "master/edit.h"
#include "master/running_job.h"
#include "master/scheduler.h"
#include "master/state_registry.h"
#include "master/storages.h"
#include "master/study_driver.h"
#include "stagetree/tree.h"

namespace hippo::master {

// The job for `work` on a worker of `storage` that holds the states `held`, with the snapshots
// `snapshot_every` asks for (scheduler.h's snapshot_steps), under a study whose spec says how to
// run it. Its id is the pool's to give.
RunningJob build_job(const WorkItem& work, const StudySpec& spec, const StageTree& tree,
                     StateRegistry& states, const std::set<int64_t>& held,
                     const std::string& storage, int64_t snapshot_every);

// The job trained its path over [its last reported step, step), and the worker holds the state at
// `step`: every stage on the path it passed is trained that far, and the steps count as executed
// for its studies.
void add_progress(Edit& e, const RunningJob& job, const StageTree& tree, int64_t step);

// Whether a job that trains (its order's from < to) still makes what some open trial needs, by
// `needed_ends` (for each stage, the end up to which a trial needs it): a stage on its path
// needed past the step the worker got to (`progress_step`), or past the job's last announced
// state (`reported_step`) at a step where the job was ordered a snapshot that it has not
// announced yet. The latter is a state trained and being written: a worker reports the metrics at
// a step, and its heartbeats say it got there, before that step's checkpoint is written and
// announced. Abandoned then, the state is lost and its steps are trained again.
bool trains_needed(const RunningJob& job, const StageTree& tree,
                   const std::unordered_map<StageId, int64_t>& needed_ends);

// The job's row in the plan's executions (the dashboard's timeline) as it ends, reaching `reached`
// (clamped to its steps).
// A running job's row in the plan (running_jobs): counted up to its reported step, naming the
// files it was ordered to write.
RunningJobRow running_job_row(const RunningJob& job, const std::string& incarnation,
                              const std::string& worker);
// A running job of an earlier master as its row kept it (its order's steps, its studies, its
// steps counted up to `reported_step`): what its execution is recorded from.
RunningJob running_job_of(const RunningJobRow& row);

edit::AddExecution execution(const RunningJob& job, const StageTree& tree,
                             const std::string& worker, ExecutionOutcome outcome, int64_t reached,
                             const std::string& error = "");

// A job that ended before its end (lost, failed, abandoned, or running at shutdown): its row,
// reaching as far as the worker said (`reached`, or its heartbeats), and the steps it trained past
// its last reported state, lost, counted as executed (the summary counts redone work, and the
// dashboard's sum of executions equals it).
void add_unfinished(Edit& e, const RunningJob& job, const StageTree& tree,
                    const std::string& worker, ExecutionOutcome outcome,
                    std::optional<int64_t> reached = std::nullopt, const std::string& error = "");

}  // namespace hippo::master
